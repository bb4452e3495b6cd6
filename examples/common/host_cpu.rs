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
