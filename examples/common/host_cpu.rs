//! The whole host's CPU time, for benchmarks that count what a job costs
//! the machine (the daemon's, the runtime's and the containers' share
//! included, not only the benchmark's own process).

/// Busy and total CPU time of the whole host so far, in clock ticks
/// (`/proc/stat`), or `None` off Linux.
pub fn host_cpu() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let ticks: Vec<u64> = line
        .split_whitespace()
        .filter_map(|t| t.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal ...
    let idle = ticks.get(3)? + ticks.get(4).unwrap_or(&0);
    let total: u64 = ticks.iter().take(8).sum();
    Some((total - idle, total))
}

/// Clock ticks per second (`USER_HZ`: 100 on every Linux this runs on).
pub const TICKS_PER_SECOND: f64 = 100.0;

/// Every process's CPU time now: its own, and that of the children it
/// waited for (a shim's `runc`, the daemon's storage helpers), by process.
pub struct ProcessCpu(std::collections::HashMap<(u32, u64), (String, u64, u64)>);

impl ProcessCpu {
    /// Reads `/proc/*/stat` (empty off Linux).
    pub fn now() -> ProcessCpu {
        let mut all = std::collections::HashMap::new();
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return ProcessCpu(all);
        };
        for entry in dir.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // The name is between the first `(` and the last `)`.
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
                continue;
            };
            let name = stat[open + 1..close].to_string();
            let fields: Vec<u64> = stat[close + 1..]
                .split_whitespace()
                .skip(1)
                .map(|f| f.parse().unwrap_or(0))
                .collect();
            // utime stime cutime cstime are fields 14-17, starttime 22.
            let field = |n: usize| fields.get(n - 4).copied().unwrap_or(0);
            all.insert(
                (pid, field(22)),
                (name, field(14) + field(15), field(16) + field(17)),
            );
        }
        ProcessCpu(all)
    }

    /// CPU ticks spent since `before`, by process name: a process's own,
    /// and apart from it (`name (waited-for children)`) that of children
    /// that ended and were waited for. Processes that came and went without
    /// a living parent waiting for them are not counted. Largest first.
    pub fn since(&self, before: &ProcessCpu) -> Vec<(String, u64)> {
        let mut by_name = std::collections::HashMap::<String, u64>::new();
        for (key, (name, own, children)) in &self.0 {
            let (own0, children0) = before
                .0
                .get(key)
                .map_or((0, 0), |(_, own, children)| (*own, *children));
            *by_name.entry(name.clone()).or_default() += own.saturating_sub(own0);
            *by_name
                .entry(format!("{name} (waited-for children)"))
                .or_default() += children.saturating_sub(children0);
        }
        let mut list: Vec<(String, u64)> = by_name.into_iter().filter(|(_, t)| *t > 0).collect();
        list.sort_by_key(|(_, ticks)| std::cmp::Reverse(*ticks));
        list
    }

    /// The `top` processes of [`ProcessCpu::since`], in milliseconds of CPU
    /// per one of `count` jobs: `name ms, name ms, ...`.
    pub fn summary(&self, before: &ProcessCpu, count: usize, top: usize) -> String {
        per_job(&self.since(before), count, top)
    }
}

/// The `top` entries of a [`ProcessCpu::since`] list, in milliseconds of
/// CPU per one of `count` jobs: `name ms, name ms, ...`.
pub fn per_job(spent: &[(String, u64)], count: usize, top: usize) -> String {
    spent
        .iter()
        .take(top)
        .map(|(name, ticks)| format!("{name} {:.0}", ms_per_job(*ticks, count)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Clock ticks as milliseconds of CPU per one of `count` jobs.
pub fn ms_per_job(ticks: u64, count: usize) -> f64 {
    ticks as f64 * 1e3 / TICKS_PER_SECOND / count.max(1) as f64
}
