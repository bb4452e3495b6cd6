//! Each sandbox's CPU, memory and disk over time, as E2B's `get_metrics`
//! returns them: read from the container's cgroup every few seconds while
//! it runs, the last hour kept.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use dockhand::session::Session;
use serde_json::{json, Value};

use super::lock;

/// Points kept per sandbox: an hour at the default interval.
const KEPT: usize = 720;
/// The writable layer is walked to size it: every so many readings only.
const DISK_EVERY: u32 = 6;
/// Sandboxes read at once: the daemon answers each from its stats
/// collector, which samples once a second, so a reading mostly waits.
pub const AT_ONCE: usize = 32;
/// How long one reading may take before it is skipped.
const READING_LIMIT: Duration = Duration::from_secs(10);

/// One reading, as E2B's `SandboxMetric` carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub at: DateTime<Utc>,
    pub cpu_count: f64,
    /// Of the CPUs it may use, since the reading before (0 for the first).
    pub cpu_used_pct: f64,
    pub mem_used: u64,
    pub mem_total: u64,
    pub mem_cache: u64,
    pub disk_used: u64,
}

/// A sandbox's readings.
#[derive(Default)]
pub struct Series {
    inner: Mutex<Readings>,
    /// One reading at a time (the sampler's and a caller's may meet).
    reading: tokio::sync::Mutex<()>,
}

#[derive(Default)]
struct Readings {
    points: VecDeque<Point>,
    /// The CPU counter at the last reading, to make a rate of the next.
    last_cpu: Option<(Instant, u64)>,
    taken: u32,
    disk: u64,
}

impl Series {
    /// The readings from `start` to `end` (Unix seconds, both optional).
    pub fn between(&self, start: Option<i64>, end: Option<i64>) -> Vec<Point> {
        lock(&self.inner)
            .points
            .iter()
            .filter(|p| start.is_none_or(|s| p.at.timestamp() >= s))
            .filter(|p| end.is_none_or(|e| p.at.timestamp() <= e))
            .cloned()
            .collect()
    }

    /// The newest reading, if any.
    pub fn latest(&self) -> Option<Point> {
        lock(&self.inner).points.back().cloned()
    }

    /// The last `n` readings, oldest first.
    pub fn last(&self, n: usize) -> Vec<Point> {
        let r = lock(&self.inner);
        r.points
            .iter()
            .skip(r.points.len().saturating_sub(n))
            .cloned()
            .collect()
    }

    /// Forgets the CPU counter: after a pause the container (and its
    /// counter) is a new one.
    pub fn restart(&self) {
        lock(&self.inner).last_cpu = None;
    }
}

/// Takes one reading of a sandbox's `session` into its `series`; `None`
/// when it cannot be read now (paused, closing, the daemon slow).
pub async fn read(series: &Series, session: &Session) -> Option<Point> {
    if session.state() == dockhand::State::Paused {
        return None;
    }
    let _one = series.reading.lock().await;
    let disk_due = lock(&series.inner).taken.is_multiple_of(DISK_EVERY);
    let reading = async {
        let usage = session.usage().await?;
        let disk = match disk_due {
            true => session.disk_usage().await?,
            false => None,
        };
        Ok::<_, dockhand::Error>((usage, disk))
    };
    let (usage, disk) = match tokio::time::timeout(READING_LIMIT, reading).await {
        Ok(Ok(read)) => read,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "reading a sandbox's resource use");
            return None;
        }
        Err(_) => return None,
    };
    let now = Instant::now();
    let mut r = lock(&series.inner);
    let cpu_used_pct = match r.last_cpu {
        Some((then, before)) if usage.cpu_nanos >= before => {
            let wall = now.duration_since(then).as_nanos() as f64;
            let used = (usage.cpu_nanos - before) as f64;
            if wall > 0.0 && usage.cpus > 0.0 {
                (100.0 * used / wall / usage.cpus).clamp(0.0, 100.0)
            } else {
                0.0
            }
        }
        _ => 0.0,
    };
    r.last_cpu = Some((now, usage.cpu_nanos));
    r.taken = r.taken.wrapping_add(1);
    if let Some(disk) = disk {
        r.disk = disk;
    }
    let point = Point {
        at: Utc::now(),
        cpu_count: usage.cpus,
        cpu_used_pct: (cpu_used_pct * 100.0).round() / 100.0,
        mem_used: usage.memory_used_bytes(),
        mem_total: usage.memory_limit_bytes,
        mem_cache: usage.memory_cache_bytes,
        disk_used: r.disk,
    };
    if r.points.len() == KEPT {
        r.points.pop_front();
    }
    r.points.push_back(point.clone());
    Some(point)
}

/// The readings as E2B's API returns them. `disk_total` is 0: sandboxes
/// share the daemon's disk, with no size of their own.
pub fn as_json(points: &[Point]) -> Value {
    points
        .iter()
        .map(|p| {
            json!({
                "timestamp": p.at.to_rfc3339(),
                "timestampUnix": p.at.timestamp(),
                "cpuCount": p.cpu_count.ceil() as u64,
                "cpuUsedPct": p.cpu_used_pct,
                "memUsed": p.mem_used,
                "memTotal": p.mem_total,
                "memCache": p.mem_cache,
                "diskUsed": p.disk_used,
                "diskTotal": 0,
            })
        })
        .collect()
}
