//! Ownership of one container: removed exactly once, whatever happens.

use super::{container::remove_with, Engine};
use crate::error::Result;

/// Owns a container. Call [`ContainerGuard::remove`] on the normal path; if the
/// guard is dropped instead (an error returned early, the future cancelled, a
/// panic), the container is force-removed before `drop` returns.
#[derive(Debug)]
pub struct ContainerGuard {
    engine: Engine,
    id: String,
    removed: bool,
}

impl ContainerGuard {
    pub(super) fn new(engine: Engine, id: String) -> Self {
        ContainerGuard {
            engine,
            id,
            removed: false,
        }
    }

    /// The container id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Removes the container now.
    pub async fn remove(mut self) -> Result<()> {
        self.removed = true;
        self.engine.remove_container(&self.id).await
    }
}

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        // The runtime that drives our client may be the one being torn down (a
        // panicking test, a dropped future at shutdown), so a spawned task could
        // never run. Remove on a helper thread with its own client and runtime,
        // and wait for it: a container must not outlive its guard.
        let Ok(docker) = self.engine.reconnect() else {
            tracing::warn!(container = %self.id, "cannot reconnect to remove container");
            return;
        };
        let id = std::mem::take(&mut self.id);
        let helper = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            match runtime {
                Ok(rt) => {
                    if let Err(e) = rt.block_on(remove_with(&docker, &id)) {
                        tracing::warn!(container = %id, error = %e, "removing container on drop failed");
                    }
                }
                Err(e) => {
                    tracing::warn!(container = %id, error = %e, "no runtime to remove container")
                }
            }
        });
        let _ = helper.join();
    }
}
