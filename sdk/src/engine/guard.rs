//! Ownership of one container and its scratch volumes: removed exactly once,
//! whatever happens.
//!
//! The guard exists before the create request is sent: the container is
//! created under a name the guard already holds, so a create whose caller
//! went away (a dropped future) is still found and removed. Its scratch
//! volumes carry a label with the same token, so they are removed even when
//! the container was removed from outside without them (`docker rm -f`).

use std::time::Duration;

use super::{container::remove_with, Engine};
use crate::error::Result;

/// Owns a container. Call [`ContainerGuard::remove`] on the normal path; if the
/// guard is dropped instead (an error returned early, the future cancelled, a
/// panic), the container and its volumes are force-removed.
#[derive(Debug)]
pub struct ContainerGuard {
    engine: Engine,
    /// The container's id once created; its name before.
    id: String,
    /// The token in its name and on its volumes' labels.
    token: String,
    /// A create request was sent and has not answered yet.
    creating: bool,
    removed: bool,
}

impl ContainerGuard {
    /// A guard for a container about to be created under [`Self::name`].
    pub(super) fn before_create(engine: Engine) -> Self {
        let token = uuid::Uuid::new_v4().simple().to_string();
        ContainerGuard {
            engine,
            id: format!("dockhand-{token}"),
            token,
            creating: true,
            removed: false,
        }
    }

    /// The name the container is created under.
    pub(super) fn name(&self) -> String {
        format!("dockhand-{}", self.token)
    }

    /// The token its scratch volumes are labelled with.
    pub(super) fn token(&self) -> &str {
        &self.token
    }

    /// The create request answered: this is the container's id.
    pub(super) fn created(&mut self, id: String) {
        self.id = id;
        self.creating = false;
    }

    /// The create request answered with an error: no container exists.
    pub(super) fn not_created(&mut self) {
        self.creating = false;
    }

    /// The container id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Removes the container and its volumes on a thread of its own, without
    /// waiting: for answering at a time limit. Independent of the caller's
    /// runtime, which may be busy or about to end.
    pub fn remove_in_background(self) {
        std::thread::spawn(move || drop(self));
    }

    /// Removes the container and its volumes now.
    pub async fn remove(mut self) -> Result<()> {
        self.removed = true;
        remove_with(&self.engine.docker, &self.id, &self.token).await
    }
}

impl Drop for ContainerGuard {
    fn drop(&mut self) {
        if self.removed {
            return;
        }
        // The runtime that drives our client may be the one being torn down (a
        // panicking test, a dropped future at shutdown), so a spawned task could
        // never run. Remove on a helper thread with its own client and runtime.
        let Ok(docker) = self.engine.reconnect() else {
            tracing::warn!(container = %self.id, "cannot reconnect to remove container");
            return;
        };
        let (id, token, creating) = (
            std::mem::take(&mut self.id),
            std::mem::take(&mut self.token),
            self.creating,
        );
        let helper = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                tracing::warn!(container = %id, "no runtime to remove container");
                return;
            };
            rt.block_on(async {
                if let Err(e) = remove_with(&docker, &id, &token).await {
                    tracing::warn!(container = %id, error = %e, "removing container on drop failed");
                }
                // A create still in flight may land after that removal: look
                // again, by name, once the daemon has had time to finish it.
                if creating {
                    for wait in [200, 800, 2000] {
                        tokio::time::sleep(Duration::from_millis(wait)).await;
                        let _ = remove_with(&docker, &id, &token).await;
                    }
                }
            });
        });
        if creating {
            // Nothing to wait for now: the helper looks for a late create.
            return;
        }
        // Wait for the removal (a container must not outlive its guard), but
        // never stall an async runtime: on a multi-threaded one, hand this
        // worker's tasks to another thread while waiting. A current-thread
        // runtime cannot: its connections (one may hold the container busy in
        // the daemon) only move while its thread runs, so there the removal
        // finishes on its own.
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => {
                tokio::task::block_in_place(|| {
                    let _ = helper.join();
                });
            }
            Ok(_) => {}
            Err(_) => {
                let _ = helper.join();
            }
        }
    }
}
