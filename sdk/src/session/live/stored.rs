//! A session whose files live apart from what runs it: on a cluster, a
//! pausable or kept session's workspace is a PersistentVolumeClaim of its
//! own. A pause deletes the pod and keeps the claim; a resume starts a new
//! pod on it, on whichever node the scheduler picks; a fork starts each
//! child on a copy of it; a kept session's claim outlives this process and
//! is taken over by another (one holder at a time).
//!
//! Only files are kept: memory and processes (Docker's memory mode) would
//! need a node-side checkpoint, which a cluster does not offer (see
//! `MEMORY_ON_CLUSTER`).

use std::time::SystemTime;

use super::pause::{KeptSession, Parked, PauseMode, Paused};
use super::*;
use crate::backend::{FilesOf, Held};

/// Why a memory pause is refused on a cluster.
pub(super) const MEMORY_ON_CLUSTER: &str = "a memory pause needs a checkpoint of the pod's processes, which Kubernetes does not offer (gVisor's checkpoint under containerd's runsc shim and a node-side agent could; see docs/scale-out.md); pause with PauseMode::Filesystem, which keeps the workspace on the session's claim";

/// A session paused with its files on the claim `files`, nothing running.
fn stopped(files: String) -> Parked {
    Parked {
        held: Held::Stopped(files),
        egress: None,
        mode: PauseMode::Filesystem,
        checkpoint: None,
        carry: None,
        seal: None,
        live: false,
        since: SystemTime::now(),
    }
}

impl Session {
    /// What a claim of this session's files is made of: its name, `image`,
    /// workspace and user; copied from `from` if given, kept or not.
    fn files_of<'a>(
        &'a self,
        image: &'a str,
        from: Option<&'a str>,
        kept: bool,
        kind: Option<&'a str>,
    ) -> FilesOf<'a> {
        let c = &self.inner.config;
        let (uid, gid) = c.hardening.owner_ids();
        FilesOf {
            session_name: c.name.as_deref().unwrap_or("s"),
            image,
            workspace: &c.workspace,
            kept,
            from,
            user: c.hardening.user_name().map(|_| (uid as i64, gid as i64)),
            kind,
        }
    }

    /// The claim this session's files are on and the image its pod runs,
    /// what a fork or a snapshot copies.
    fn stored_source(&self) -> Result<(String, String)> {
        let from = self.files_claim().ok_or_else(|| self.gone())?;
        let image = lock(&self.inner.status).life.image.clone();
        Ok((from, image.ok_or_else(|| self.gone())?))
    }

    /// Makes the claim a pausable session keeps its files on, where its
    /// backend keeps files apart from the pod (a cluster), unless it has
    /// one: `true` if made now. A fork's is a copy of its parent's.
    pub(super) async fn ensure_files(&self, image: &str) -> Result<bool> {
        let c = &self.inner.config;
        if !c.pausable || lock(&self.inner.files).is_some() {
            return Ok(false);
        }
        let from = lock(&self.inner.fork_from)
            .clone()
            .or_else(|| c.from_files.clone());
        let about = self.files_of(image, from.as_deref(), c.keep, None);
        match self.inner.client.runs_on().files_claim(&about).await? {
            Some(files) => {
                *lock(&self.inner.files) = Some(files);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The claim this session keeps its files on, if it has one.
    pub(super) fn files_claim(&self) -> Option<String> {
        lock(&self.inner.files)
            .as_ref()
            .map(|f| f.name().to_string())
    }

    /// Pauses a session whose files are on a claim: its pod is deleted,
    /// the claim stays. Memory is refused ([`MEMORY_ON_CLUSTER`]).
    pub(super) async fn pause_stored(&self, mode: PauseMode) -> Result<Paused> {
        let _one_at_a_time = self.inner.start_lock.lock().await;
        self.check_pausable()?;
        if mode == PauseMode::Memory {
            return Err(Error::PauseUnsupported {
                reason: MEMORY_ON_CLUSTER.into(),
            });
        }
        let files = self.files_claim().ok_or_else(|| self.gone())?;
        lock(&self.inner.status).life.transition(State::Paused)?;
        let Some(conn) = lock(&self.inner.conn).take() else {
            return Err(self.gone());
        };
        // The processes are gone with the pod: so are their replies.
        lock(&conn.routes).take();
        let held = lock(&conn.holder).take();
        drop(conn);
        if let Some(held) = held {
            if let Err(e) = held.remove().await {
                // The lease's collector takes it; the files are on the claim.
                tracing::warn!(error = %e, "deleting a paused session's pod failed");
            }
        }
        *lock(&self.inner.parked) = Some(stopped(files.clone()));
        Ok(Paused {
            id: files,
            mode: PauseMode::Filesystem,
            checkpoint_bytes: None,
        })
    }

    /// Resumes a session paused by [`pause_stored`](Self::pause_stored):
    /// a new pod on its claim.
    pub(super) async fn resume_stored(&self) -> Result<()> {
        let conn = self.come_up("the resume", self.launch()).await?;
        self.runs_in(conn, None)
    }
}

impl Session {
    /// A snapshot of a session whose files are on a claim: a copy of the
    /// claim that outlives the session (and this process), with the image
    /// its pod runs.
    pub(super) async fn snapshot_stored(&self) -> Result<Snapshot> {
        let (from, image) = self.stored_source()?;
        let about = self.files_of(
            &image,
            Some(&from),
            true,
            Some(crate::backend::SNAPSHOT_KIND),
        );
        let files = self
            .inner
            .client
            .runs_on()
            .files_claim(&about)
            .await?
            .ok_or_else(|| self.gone())?;
        let name = files.name().to_string();
        files.release();
        lock(&self.inner.status).snapshots.push(name.clone());
        Ok(Snapshot {
            image,
            id: name.clone(),
            files: Some(name),
        })
    }
}

impl Client {
    /// Snapshots whose files are on claims (a cluster's).
    pub(super) async fn stored_snapshots(&self) -> Result<Vec<Snapshot>> {
        Ok(self
            .runs_on()
            .snapshot_files_list()
            .await?
            .into_iter()
            .map(|f| Snapshot {
                image: f.image,
                id: f.name.clone(),
                files: Some(f.name),
            })
            .collect())
    }

    /// The kept session `id` on a backend that keeps its files on a
    /// claim (a cluster), as a paused session of this process; `None` if
    /// no such claim exists. Refused while another living process holds it.
    pub(super) async fn kept_stored(
        &self,
        id: &str,
        config: &SessionConfig,
    ) -> Result<Option<Session>> {
        let backend = self.runs_on();
        let Some((found, files)) = backend.hold_kept_files(id).await? else {
            return Ok(None);
        };
        // Pods of its earlier holder, which has ended (else the hold was
        // refused), go before a new one mounts the claim.
        if backend.kept_files_in_use(id).await? {
            backend.reap().await?;
        }
        let mut config = config
            .clone()
            .keep(true)
            .workspace(found.workspace.clone())
            .image(crate::image::ImageSpec::prebuilt(found.image.clone()));
        if let Some(name) = found.session_name.filter(|n| n != "s") {
            config = config.name(name);
        }
        let session = self.session(config);
        *lock(&session.inner.files) = Some(files);
        *lock(&session.inner.parked) = Some(stopped(id.to_string()));
        {
            let mut status = lock(&session.inner.status);
            status.life.state = State::Paused;
            status.life.container_id = Some(id.to_string());
            status.settled = true;
        }
        Ok(Some(session))
    }

    /// Kept sessions whose files are on claims (a cluster's).
    pub(super) async fn kept_stored_list(&self) -> Result<Vec<KeptSession>> {
        let listed = self.runs_on().kept_files_list().await?;
        Ok(listed
            .into_iter()
            .map(|files| KeptSession {
                id: files.name,
                name: files.session_name.filter(|n| n != "s"),
                state: match files.running {
                    true => "running".into(),
                    false => "stopped (files)".into(),
                },
                since: (!files.running).then_some(files.created).flatten(),
            })
            .collect())
    }
}

impl Session {
    /// `n` sessions each on a copy of this one's claim (see `fork`).
    pub(super) async fn fork_stored(&self, n: usize) -> Result<Vec<Session>> {
        let (from, image) = self.stored_source()?;
        self.start_forks(n, &image, |fork| {
            *lock(&fork.inner.fork_from) = Some(from.clone());
        })
        .await
    }
}
