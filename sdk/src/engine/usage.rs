//! What a running container uses: CPU time and memory from its cgroup (the
//! daemon's stats, read once), and the size of its writable layer.

use bollard::query_parameters::StatsOptionsBuilder;
use futures::StreamExt;

use super::Engine;
use crate::error::{Error, Result};

/// A container's resource use at one moment, as its cgroup counts it.
///
/// CPU time only grows: a rate is the difference of two readings over the
/// time between them.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub struct ResourceUsage {
    /// CPU time used since the container started, in nanoseconds.
    pub cpu_nanos: u64,
    /// CPUs the host gives the container's cgroup (its CPU limit, if it
    /// has one, is its owner's to apply).
    pub cpus: f64,
    /// Memory charged to the container, page cache included, in bytes.
    pub memory_bytes: u64,
    /// Of that, page cache (files read and written), in bytes.
    pub memory_cache_bytes: u64,
    /// The container's memory limit (the host's memory when unlimited).
    pub memory_limit_bytes: u64,
}

impl ResourceUsage {
    /// Memory in use without the page cache the kernel can drop.
    pub fn memory_used_bytes(&self) -> u64 {
        self.memory_bytes.saturating_sub(self.memory_cache_bytes)
    }
}

impl Engine {
    /// The container's CPU time and memory now: one reading of its cgroup
    /// (`one-shot`, so the daemon does not wait a second for a second one).
    pub async fn container_usage(&self, id: &str) -> Result<ResourceUsage> {
        let options = StatsOptionsBuilder::new()
            .stream(false)
            .one_shot(true)
            .build();
        let mut stats = self.docker.stats(id, Some(options));
        let reading = match stats.next().await {
            Some(Ok(reading)) => reading,
            Some(Err(e)) => return Err(self.docker_err("read container stats", e)),
            None => {
                return Err(Error::Docker {
                    operation: "read container stats",
                    message: format!("the daemon sent no stats for {id}"),
                    status: None,
                })
            }
        };
        let cpu = reading.cpu_stats.unwrap_or_default();
        let online = cpu.online_cpus.unwrap_or(1).max(1) as f64;
        let memory = reading.memory_stats.unwrap_or_default();
        let counters = memory.stats.unwrap_or_default();
        // cgroup v1 names the page cache `cache`; v2 names it `file`.
        let cache = counters
            .get("cache")
            .or_else(|| counters.get("file"))
            .copied()
            .unwrap_or(0);
        Ok(ResourceUsage {
            cpu_nanos: cpu.cpu_usage.and_then(|u| u.total_usage).unwrap_or(0),
            cpus: online,
            memory_bytes: memory.usage.unwrap_or(0),
            memory_cache_bytes: cache,
            memory_limit_bytes: memory.limit.unwrap_or(0),
        })
    }

    /// The size of what the container wrote outside its volumes, in
    /// bytes: its writable layer, summed from the daemon's directory for
    /// it where this machine shares the daemon's filesystem and may read
    /// it. `None` elsewhere: the daemon's own count (`size=true`) walks
    /// the whole image on some storage drivers (seconds per call on
    /// fuse-overlayfs), too dear to take every few seconds.
    pub async fn container_disk_bytes(&self, id: &str) -> Result<Option<u64>> {
        if !self.target.shares_filesystem {
            return Ok(None);
        }
        let inspected = self
            .docker
            .inspect_container(id, None)
            .await
            .map_err(|e| self.docker_err("inspect container", e))?;
        let Some(upper) = inspected
            .graph_driver
            .and_then(|d| d.data.get("UpperDir").cloned())
        else {
            return Ok(None);
        };
        let walked = tokio::task::spawn_blocking(move || tree_bytes(std::path::Path::new(&upper)));
        Ok(walked.await.ok().flatten())
    }
}

/// Entries a disk reading looks at before it gives up (a layer of
/// millions of small files is not worth a reading every few seconds).
const MAX_ENTRIES: usize = 200_000;

/// The bytes of the files under `root`, links not followed; `None` when
/// it cannot be read or holds more than [`MAX_ENTRIES`].
fn tree_bytes(root: &std::path::Path) -> Option<u64> {
    let mut total = 0u64;
    let mut seen = 0usize;
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).ok()? {
            seen += 1;
            if seen > MAX_ENTRIES {
                return None;
            }
            let Ok(entry) = entry else { continue };
            let Ok(meta) = entry.path().symlink_metadata() else {
                continue;
            };
            if meta.is_dir() {
                pending.push(entry.path());
            } else if meta.is_file() {
                total += meta.len();
            }
        }
    }
    Some(total)
}
