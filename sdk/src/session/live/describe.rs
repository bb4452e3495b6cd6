//! What a session reports about itself.

use serde::Serialize;

use super::{lock, Session};
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
}
