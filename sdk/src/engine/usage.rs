//! What a running container uses: CPU time and memory from its cgroup (the
//! daemon's stats, read once), and the size of its writable layer.

use bollard::query_parameters::{InspectContainerOptionsBuilder, StatsOptionsBuilder};
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

    /// The size of the container's writable layer: what it has written
    /// outside its volumes, in bytes. The daemon walks the layer to count
    /// it, so this costs more than [`Engine::container_usage`].
    pub async fn container_disk_bytes(&self, id: &str) -> Result<u64> {
        let options = InspectContainerOptionsBuilder::new().size(true).build();
        let inspected = self
            .docker
            .inspect_container(id, Some(options))
            .await
            .map_err(|e| self.docker_err("inspect container size", e))?;
        Ok(inspected.size_rw.unwrap_or(0).max(0) as u64)
    }
}
