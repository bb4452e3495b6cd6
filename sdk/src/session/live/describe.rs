//! What a session reports about itself.

use serde::Serialize;

use super::{lock, Session};
use crate::engine::ResourceUsage;
use crate::error::{Error, Result};
use crate::lifecycle::State;

/// What [`Session::describe`] reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct SessionDescription {
    /// Container id, while there is one.
    pub container_id: Option<String>,
    /// Lifecycle state.
    pub state: State,
    /// Image reference.
    pub image: Option<String>,
    /// Workspace directory.
    pub workspace: String,
    /// Memory limit.
    pub memory_bytes: i64,
    /// CPU limit.
    pub cpus: f64,
    /// Commands run.
    pub commands: u64,
    /// Snapshots taken.
    pub snapshots: Vec<String>,
    /// Why the session is in `error`.
    pub last_error: Option<String>,
}

impl Session {
    /// Id, state, image, limits, commands run, snapshots.
    pub fn describe(&self) -> SessionDescription {
        let s = lock(&self.inner.status);
        let c = &self.inner.config;
        let resources = c.checked_resources().unwrap_or(c.resources);
        SessionDescription {
            container_id: s.life.container_id.clone(),
            state: s.life.state,
            image: s.life.image.clone(),
            workspace: c.workspace.clone(),
            memory_bytes: resources.memory_bytes,
            cpus: resources.cpus,
            commands: s.commands,
            snapshots: s.snapshots.clone(),
            last_error: s.life.last_error.clone(),
        }
    }

    /// What the session's container uses now: CPU time and memory from its
    /// cgroup, as the daemon reads it. `cpus` is the session's CPU limit
    /// where it has one. A running session only: a paused or closed one
    /// has no cgroup to read.
    ///
    /// ```no_run
    /// # async fn demo(session: &dockhand::session::Session) -> dockhand::Result<()> {
    /// use dockhand::session::SessionApi;
    /// let before = session.usage().await?;
    /// session.exec("python3 -c 'sum(range(10**7))'").await?;
    /// let after = session.usage().await?;
    /// let cpu_ms = (after.cpu_nanos - before.cpu_nanos) / 1_000_000;
    /// println!("{cpu_ms} ms of CPU, {} MiB in use", after.memory_used_bytes() >> 20);
    /// # Ok(()) }
    /// ```
    pub async fn usage(&self) -> Result<ResourceUsage> {
        let id = self.running_container("read its resource use")?;
        let mut usage = self.inner.client.engine()?.container_usage(&id).await?;
        let limit = self.describe().cpus;
        if limit > 0.0 {
            usage.cpus = usage.cpus.min(limit);
        }
        Ok(usage)
    }

    /// How much the session's container has written outside its volumes,
    /// in bytes, where this machine can read the daemon's storage (a local
    /// daemon, and the permission to); `None` elsewhere.
    pub async fn disk_usage(&self) -> Result<Option<u64>> {
        let id = self.running_container("read its disk use")?;
        self.inner.client.engine()?.container_disk_bytes(&id).await
    }

    /// The container of a session that is up, or why there is none.
    fn running_container(&self, doing: &'static str) -> Result<String> {
        let s = lock(&self.inner.status);
        match (&s.life.container_id, s.life.state) {
            (Some(id), State::Idle | State::Running) => Ok(id.clone()),
            (_, state) => Err(Error::InvalidTransition {
                from: state.to_string(),
                to: format!("running ({doing} needs a running container)"),
            }),
        }
    }
}
