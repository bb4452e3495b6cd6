//! Images committed from a session's container: snapshots, which outlive
//! the process, and the images forks and resumes start from, which belong
//! to it. No secret is in one (the container's configuration holds none:
//! variables reach commands through the agent, files live on a volume),
//! and a commit whose caller goes away leaves no image behind.

use super::*;
use crate::engine::{labels, Engine};

/// How many layers an image may stack before the next resume from it
/// flattens it (Docker refuses to commit past 125).
pub(super) const FLATTEN_PAST: usize = 96;

/// Who an image committed from a session's container belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Lifetime {
    /// A snapshot the user keeps: no owner, nothing removes it unasked.
    Kept,
    /// Made for this process's own use (forks, resumes): labelled with its
    /// owner from the commit request on, so the owner's watchdog or a later
    /// `reap` removes it if the owner dies before it does.
    Owned,
}

impl Session {
    /// Commits the container's filesystem (the workspace included, mounts not)
    /// to a labelled image that a new session can start from. The session's
    /// secrets are not in it.
    pub async fn snapshot(&self) -> Result<Snapshot> {
        // Files on a claim (a cluster's): a kept copy of it.
        if self.files_claim().is_some() {
            return Box::pin(self.snapshot_stored()).await;
        }
        let offers = self.inner.client.runs_on().offers();
        if !offers.image_commit {
            return Err(offers.unsupported(
                "a snapshot of a session that is not pausable",
                "a snapshot there is a copy of a pausable session's claim: make the session pausable(true)",
            ));
        }
        let snapshot = self.commit_snapshot(Lifetime::Kept).await?;
        lock(&self.inner.status)
            .snapshots
            .push(snapshot.image.clone());
        Ok(snapshot)
    }

    /// A `dockhand/snapshot:<name>-<stamp>` image of the running container.
    pub(super) async fn commit_snapshot(&self, lifetime: Lifetime) -> Result<Snapshot> {
        let conn = self.conn()?;
        let stamp = chrono::Utc::now().format("%Y%m%d%H%M%S%3f");
        let name: String = self
            .inner
            .config
            .name
            .clone()
            .unwrap_or_else(|| conn.container_id.chars().take(12).collect())
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect();
        let image = format!("dockhand/snapshot:{name}-{stamp}");
        let engine = self.inner.client.engine()?.clone();
        let id = self
            .commit_image(&engine, &conn.container_id, &image, lifetime)
            .await?;
        Ok(Snapshot {
            image,
            id,
            files: None,
        })
    }

    /// Commits `container` as `image`; its id. Dropped before the daemon
    /// answers, the image (which the daemon goes on making) is removed once
    /// it lands.
    pub(super) async fn commit_image(
        &self,
        engine: &Engine,
        container: &str,
        image: &str,
        lifetime: Lifetime,
    ) -> Result<String> {
        self.make_image(engine, container, image, lifetime, false)
            .await
    }

    /// The image a memory-paused `container` (made from `from`) is moved
    /// on from at a resume: a commit, one layer over `from`'s; or, once
    /// `from` stacks [`FLATTEN_PAST`] layers, its whole filesystem in one
    /// layer, so that resumes never reach Docker's limit of 125 however
    /// many there are.
    pub(super) async fn relocation_image(
        &self,
        engine: &Engine,
        container: &str,
        from: &str,
        image: &str,
    ) -> Result<String> {
        let depth = engine
            .inspect_image(from)
            .await?
            .map_or(0, |info| info.layers);
        let flatten = depth >= FLATTEN_PAST;
        if flatten {
            tracing::debug!(depth, image, "flattening a resumed session's image");
        }
        self.make_image(engine, container, image, Lifetime::Owned, flatten)
            .await
    }

    async fn make_image(
        &self,
        engine: &Engine,
        container: &str,
        image: &str,
        lifetime: Lifetime,
        flatten: bool,
    ) -> Result<String> {
        let mut extra = HashMap::from([(
            "dev.dockhand.snapshot-of".to_string(),
            container.to_string(),
        )]);
        if lifetime == Lifetime::Owned {
            extra.extend(labels::owner());
        }
        let mut pending = Uncommitted {
            engine: engine.clone(),
            image: Some(image.to_string()),
        };
        let committed = match flatten {
            true => {
                engine
                    .flatten_container(container, image, "snapshot", extra)
                    .await
            }
            false => {
                engine
                    .commit_container(container, image, "snapshot", extra)
                    .await
            }
        };
        // Answered: made, or refused (nothing to remove either way).
        pending.image = None;
        committed
    }
}

/// A commit under way; dropped unanswered, it removes the image when the
/// daemon has made it.
struct Uncommitted {
    engine: Engine,
    image: Option<String>,
}

impl Drop for Uncommitted {
    fn drop(&mut self) {
        if let Some(image) = self.image.take() {
            self.engine
                .remove_image_later(image, Duration::from_secs(60));
        }
    }
}
