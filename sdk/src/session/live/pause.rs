//! Pausing a session: its container stopped with its memory saved (a
//! checkpoint, under gVisor) or with its files only; resuming it, in this
//! process or (for a kept session) in a later one.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::launch::{connect_container, Carry};
use super::*;
use crate::engine::{checkpoint_name, labels, mark_unique, seal, ContainerGuard, KeptSeals, Seal};

/// What a pause keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PauseMode {
    /// Processes, memory and open files (a gVisor checkpoint): a resume
    /// goes on where the session stopped, a kernel's variables included.
    Memory,
    /// Files only: the container stops, its processes end; a resume
    /// starts the agent again on the same files.
    Filesystem,
}

impl std::fmt::Display for PauseMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PauseMode::Memory => "memory",
            PauseMode::Filesystem => "filesystem",
        })
    }
}

impl std::str::FromStr for PauseMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "memory" | "full" => Ok(PauseMode::Memory),
            "filesystem" | "files" => Ok(PauseMode::Filesystem),
            other => Err(format!(
                "`{other}` is not a pause mode: `memory` or `filesystem`"
            )),
        }
    }
}

/// A paused session, as [`Session::pause`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paused {
    /// The container's id: what [`Client::resume_session`] takes (for a
    /// kept session, from any later process).
    pub id: String,
    /// What the pause kept.
    pub mode: PauseMode,
    /// The checkpoint's size in bytes (memory mode, on a local daemon).
    pub checkpoint_bytes: Option<u64>,
}

/// A kept session's container, as [`Client::kept_sessions`] lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeptSession {
    /// The container's id.
    pub id: String,
    /// The session's name, if it was given one.
    pub name: Option<String>,
    /// Running (some process holds it), paused with its memory, or
    /// stopped with its files.
    pub state: String,
    /// When it stopped (RFC 3339), if it is not running.
    pub since: Option<String>,
}

/// A paused session's stopped container and what resumes it.
pub(super) struct Parked {
    pub(super) held: Held,
    pub(super) egress: Option<crate::gateway::Lease>,
    pub(super) mode: PauseMode,
    /// The checkpoint to restore (memory mode).
    pub(super) checkpoint: Option<String>,
    /// The routes of requests whose processes live on in the checkpoint.
    pub(super) carry: Option<Carry>,
    /// The checkpoint's files as written (a local daemon's): a resume
    /// refuses one changed or swapped since.
    pub(super) seal: Option<Seal>,
    /// Not stopped at all: a kept session's container still running, its
    /// agent waiting for a host to attach again.
    pub(super) live: bool,
    pub(super) since: SystemTime,
}

impl Parked {
    /// Removes the container (its checkpoints go with it) and the lease.
    pub(super) async fn remove(self) {
        if let Err(e) = self.held.remove().await {
            tracing::warn!(error = %e, "removing a paused session's container failed");
        }
        if let Some(lease) = self.egress {
            lease.close().await;
        }
    }
}

impl Session {
    /// Pauses the session: its container stops and costs no CPU or memory
    /// until [`resume`](Self::resume). [`PauseMode::Memory`] saves its
    /// processes and memory (it needs gVisor and a daemon with
    /// `experimental` on; elsewhere [`Error::PauseUnsupported`], and the
    /// session runs on); [`PauseMode::Filesystem`] keeps its files.
    ///
    /// The session must be idle and made [`pausable`](SessionConfig::pausable).
    ///
    /// ```no_run
    /// # async fn demo() -> dockhand::Result<()> {
    /// use dockhand::session::{PauseMode, SessionApi, SessionConfig};
    /// let client = dockhand::Client::connect().await?;
    /// let s = client.session(SessionConfig::new().pausable(true));
    /// s.start().await?;
    /// s.write_file("notes.txt", b"kept").await?;
    /// s.pause(PauseMode::Filesystem).await?;
    /// s.resume().await?;
    /// assert_eq!(s.read_file("notes.txt").await?, b"kept");
    /// s.close().await?;
    /// # Ok(()) }
    /// ```
    pub async fn pause(&self, mode: PauseMode) -> Result<Paused> {
        // A pause is a transaction: once begun it runs to its end on a task
        // of its own, so a caller that goes away mid-way leaves the session
        // paused and resumable (or running, if the pause failed), never
        // marked paused with nothing parked.
        let session = self.clone();
        run_to_end("pause", async move { session.pause_now(mode).await }).await
    }

    /// Refuses a pause of a session that is busy or was not made pausable.
    pub(super) fn check_pausable(&self) -> Result<()> {
        let state = self.state();
        if state != State::Idle {
            return Err(Error::InvalidTransition {
                from: state.to_string(),
                to: "paused (a pause needs an idle session: nothing under way)".into(),
            });
        }
        if !self.inner.config.pausable {
            return Err(Error::spec(
                "session",
                "this session was not made pausable: SessionConfig::pausable(true) (or keep(true)) \
                 lets its container outlive a stopped agent",
            ));
        }
        Ok(())
    }

    async fn pause_now(&self, mode: PauseMode) -> Result<Paused> {
        // Files kept apart from the container (a cluster's claim): its
        // pod goes, the claim stays.
        let Ok(engine) = self.inner.client.engine().cloned() else {
            // Boxed: the cluster's path stays out of every pause's future.
            return Box::pin(self.pause_stored(mode)).await;
        };
        let _one_at_a_time = self.inner.start_lock.lock().await;
        self.check_pausable()?;
        let c = &self.inner.config;
        let conn = self.conn()?;
        let id = conn.container_id.clone();
        if mode == PauseMode::Memory {
            if let Some(reason) = engine
                .memory_checkpoints_refused(c.isolation.runtime_name())
                .await?
            {
                return Err(Error::PauseUnsupported { reason });
            }
        }
        // Paused from before the container stops: its agent's end is then
        // expected, not a failure of the session.
        lock(&self.inner.status).life.transition(State::Paused)?;
        let checkpoint = match mode {
            PauseMode::Memory => {
                let stale = lock(&self.inner.status).checkpoint.take();
                if let Some(stale) = stale {
                    let _ = engine.delete_checkpoint(&id, &stale).await;
                }
                let name = checkpoint_name();
                conn.parking.store(true, Ordering::SeqCst);
                if let Err(e) = engine.checkpoint(&id, &name).await {
                    conn.parking.store(false, Ordering::SeqCst);
                    lock(&self.inner.status).life.state = State::Idle;
                    let _ = engine.delete_checkpoint(&id, &name).await;
                    return Err(self.pause_failed(&engine, &id, e).await);
                }
                Some(name)
            }
            PauseMode::Filesystem => {
                if let Err(e) = engine.stop_container(&id).await {
                    lock(&self.inner.status).life.state = State::Idle;
                    return Err(e);
                }
                None
            }
        };
        drop(conn);
        let Some(conn) = lock(&self.inner.conn).take() else {
            return Err(self.gone());
        };
        let Some(held) = lock(&conn.holder).take() else {
            return Err(self.gone());
        };
        let egress = conn.egress.lock().await.take();
        let carry = match checkpoint {
            Some(_) => Some(Carry {
                routes: conn.routes.clone(),
                next_id: conn.next_id.load(Ordering::SeqCst),
            }),
            None => {
                // The processes are gone: so are their replies.
                lock(&conn.routes).take();
                None
            }
        };
        drop(conn);
        // On a daemon on this machine the checkpoint's files are sealed
        // (a remote one's are the remote host's to guard).
        let local = match &checkpoint {
            Some(name) if engine.shares_filesystem() => {
                engine.checkpoint_path(&id, name).await.ok()
            }
            _ => None,
        };
        if let Some(path) = &local {
            let _ = mark_unique(path);
        }
        let seal = local.as_deref().and_then(|path| seal(path).ok());
        if let (Some(sealed), Some(name)) = (&seal, &checkpoint) {
            self.keep_seal(&id, name, sealed);
        }
        let checkpoint_bytes = seal.as_ref().map(Seal::bytes);
        *lock(&self.inner.parked) = Some(Parked {
            held,
            egress,
            mode,
            checkpoint,
            carry,
            seal,
            live: false,
            since: SystemTime::now(),
        });
        Ok(Paused {
            id,
            mode,
            checkpoint_bytes,
        })
    }

    /// A kept session's seal is kept for a later process too (see
    /// `KeptSeals`); a session that ends with its process needs none.
    pub(super) fn keep_seal(&self, container: &str, checkpoint: &str, sealed: &Seal) {
        if !self.inner.config.keep {
            return;
        }
        let seals = KeptSeals::new(self.inner.client.cache_dir());
        if let Err(e) = seals.keep(container, checkpoint, sealed) {
            tracing::warn!(error = %e, "keeping a kept session's checkpoint seal failed; a later process will refuse its memory");
        }
    }

    /// A fresh container made from a memory-paused one's files, holding
    /// (hard links to) its checkpoint, ready to start from it; `None` where
    /// that cannot be done (a daemon on another machine, or a session this
    /// process did not start), so the paused one is restored in place.
    ///
    /// Each container is checkpointed once and restored once, never more:
    /// runsc (as Debian ships it) refuses a second restore in place ("id
    /// already in use"), and Docker 20.10 a second checkpoint of one
    /// container while containerd still holds the first's contents
    /// ("content ... already exists"), losing the container.
    async fn moved(
        &self,
        engine: &crate::engine::Engine,
        old: &str,
        checkpoint: &str,
    ) -> Result<Option<(ContainerGuard, String)>> {
        let launched = lock(&self.inner.launched).clone();
        let Some(mut launched) = launched.filter(|_| engine.shares_filesystem()) else {
            return Ok(None);
        };
        let from = engine.checkpoint_path(old, checkpoint).await?;
        let stamp = chrono::Utc::now().format("%Y%m%d%H%M%S%3f");
        let image = format!("dockhand/paused:{}-{stamp}", &old[..12.min(old.len())]);
        self.relocation_image(engine, old, &launched.spec.image, &image)
            .await?;
        launched.spec.image = image.clone();
        let fresh = super::launch::prepare_restore(
            engine,
            &launched,
            &self.inner.config,
            &from,
            checkpoint,
        )
        .await;
        match fresh {
            Ok(fresh) => {
                *lock(&self.inner.launched) = Some(launched);
                Ok(Some((fresh, image)))
            }
            Err(e) => {
                let _ = engine.remove_image_if_unused(&image).await;
                Err(e)
            }
        }
    }

    /// The fresh container restored: the paused one goes, and so does the
    /// image the previous move made (the new one holds the files now).
    async fn moved_in(&self, engine: &crate::engine::Engine, old: Held, image: String) {
        let id = old.id().to_string();
        if let Err(e) = old.remove().await {
            tracing::warn!(error = %e, "removing a resumed session's old container failed");
        }
        self.end_shims(&id);
        let previous = lock(&self.inner.relocated).replace(image);
        if let Some(previous) = previous {
            let _ = engine.remove_image_if_unused(&previous).await;
        }
    }

    /// The typed error of a failed checkpoint, after finding out what
    /// became of the container: running on, or removed.
    async fn pause_failed(&self, engine: &crate::engine::Engine, id: &str, e: Error) -> Error {
        // runsc may still be ending the container when Docker answers: it
        // runs on only if it still does a moment later.
        let running_now =
            || async { matches!(engine.inspect_stopped(id).await, Ok(Some(c)) if c.running) };
        let running = running_now().await && {
            tokio::time::sleep(Duration::from_secs(1)).await;
            running_now().await
        };
        let state = if running {
            "the session runs on".to_string()
        } else {
            // Its replies' routes were kept for a resume that will not come.
            if let Some(conn) = lock(&self.inner.conn).clone() {
                lock(&conn.routes).take();
            }
            self.teardown().await;
            self.fail(format!("pause failed: {e}"));
            "the session's container stopped and was removed; start it again".to_string()
        };
        Error::Checkpoint {
            operation: "pause",
            reason: e.to_string(),
            state,
        }
    }

    /// What the paused session keeps (`None` unless it is paused, and while
    /// a pause is still stopping its container: the state is already
    /// `paused` then).
    pub fn paused_mode(&self) -> Option<PauseMode> {
        lock(&self.inner.parked).as_ref().map(|p| p.mode)
    }

    /// How long the session has been paused (`None` unless it is).
    pub fn paused_for(&self) -> Option<Duration> {
        lock(&self.inner.parked)
            .as_ref()
            .map(|p| p.since.elapsed().unwrap_or_default())
    }

    /// Resumes a paused session: from its checkpoint (memory mode: every
    /// process goes on where it stopped) or on its files (a new agent).
    /// A checkpoint the runtime refuses (altered, or another container's)
    /// is [`Error::Checkpoint`], and the session's container is removed.
    pub async fn resume(&self) -> Result<()> {
        // Like a pause, run to its end whatever becomes of the caller.
        let session = self.clone();
        run_to_end("resume", async move { session.resume_now().await }).await
    }

    async fn resume_now(&self) -> Result<()> {
        let _one_at_a_time = self.inner.start_lock.lock().await;
        let state = self.state();
        if state != State::Paused {
            return Err(Error::InvalidTransition {
                from: state.to_string(),
                to: "running (resume needs a paused session)".into(),
            });
        }
        let Some(parked) = lock(&self.inner.parked).take() else {
            return Err(self.gone());
        };
        self.set_state(State::Running)?;
        if let Held::Stopped(_) = parked.held {
            // Boxed: a new pod's start is large, and would grow every resume.
            return Box::pin(self.resume_stored()).await;
        }
        let engine = self.inner.client.engine()?.clone();
        let id = parked.held.id().to_string();
        let checkpoint = parked.checkpoint.clone();
        let resumed = async {
            if let (Some(name), Some(sealed)) = (&checkpoint, &parked.seal) {
                let path = engine.checkpoint_path(&id, name).await?;
                if seal(&path).ok().as_ref() != Some(sealed) {
                    return Err(Error::Checkpoint {
                        operation: "resume",
                        reason: "the checkpoint's files were changed or replaced after the pause"
                            .into(),
                        state: "the session's container was removed; start it again".into(),
                    });
                }
            }
            let refused = |e: Error| Error::Checkpoint {
                operation: "resume",
                reason: e.to_string(),
                state: "the session's container was removed; start it again".into(),
            };
            let old = parked.held;
            let (held, attached) = match &checkpoint {
                Some(name) => match self.moved(&engine, &id, name).await? {
                    Some((fresh, image)) => {
                        let attached = engine.attach(fresh.id()).await?;
                        engine
                            .start_from_checkpoint(fresh.id(), name)
                            .await
                            .map_err(refused)?;
                        self.moved_in(&engine, old, image).await;
                        (Held::Container(fresh), attached)
                    }
                    None => {
                        let attached = engine.attach(&id).await?;
                        engine
                            .start_from_checkpoint(&id, name)
                            .await
                            .map_err(refused)?;
                        (old, attached)
                    }
                },
                None => {
                    let attached = engine.attach(&id).await?;
                    if !parked.live {
                        engine.start_container(&id).await?;
                    }
                    (old, attached)
                }
            };
            connect_container(&engine, held, attached, parked.egress, parked.carry).await
        };
        let conn = self.come_up("the resume", resumed).await?;
        if let Some(name) = &checkpoint {
            self.forget_runtime_copies(&engine, &conn.container_id, name)
                .await;
        }
        self.runs_in(conn, checkpoint)
    }
}

/// Runs `step` on a task of its own and waits for it: dropping the wait
/// leaves the step running to its end.
async fn run_to_end<T: Send + 'static>(
    what: &str,
    step: impl std::future::Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    tokio::spawn(step).await.map_err(|e| {
        Error::io(
            "a session's pause or resume",
            std::io::Error::other(format!("the {what} did not finish: {e}")),
        )
    })?
}

/// Pauses the session once it has been idle for `idle`, until it closes
/// (or the pause is refused). Holds it weakly: a dropped session ends it.
pub(super) async fn idle_timer(inner: std::sync::Weak<Inner>, idle: Duration, mode: PauseMode) {
    let tick = idle
        .min(Duration::from_secs(1))
        .max(Duration::from_millis(50));
    loop {
        tokio::time::sleep(tick).await;
        let Some(inner) = inner.upgrade() else { return };
        let session = Session { inner };
        let (state, quiet) = {
            let status = lock(&session.inner.status);
            (status.life.state, status.last_active.elapsed())
        };
        match state {
            State::Closed => return,
            State::Idle if quiet >= idle => match session.pause(mode).await {
                Ok(_) | Err(Error::InvalidTransition { .. }) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "the idle session could not be paused; its idle timer stops");
                    return;
                }
            },
            _ => {}
        }
    }
}

impl Client {
    /// Resumes the kept session `id` (see [`SessionConfig::keep`]) in this
    /// process: still running (its owner ended), this process attaches to
    /// its agent and every process in it goes on; paused with its memory,
    /// it goes on where it stopped; paused on its files, its agent starts
    /// again on them. `config` gives the limits, secrets
    /// and timeouts to use from now on; its image is not used.
    pub async fn resume_session(&self, id: &str, config: SessionConfig) -> Result<Session> {
        let session = self.kept_session(id, config).await?;
        session.resume().await?;
        Ok(session)
    }

    /// The kept session `id` as a paused [`Session`] of this process, not
    /// resumed yet (see [`Client::resume_session`]): what a server that
    /// restarted holds until a client asks for it.
    pub async fn kept_session(&self, id: &str, config: SessionConfig) -> Result<Session> {
        // A container's id or name: anything else names no kept session,
        // and is not sent to the daemon as a path.
        let plausible = !id.is_empty()
            && id.len() <= 128
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
        if !plausible {
            return Err(Error::spec(
                "session",
                format!(
                    "`{id}` is not a kept session's id (a container id, as Session::pause or Client::kept_sessions gives it)"
                ),
            ));
        }
        // Files on a claim of a cluster's, taken over from its last holder.
        if let Some(session) = Box::pin(self.kept_stored(id, &config)).await? {
            return Ok(session);
        }
        let engine = self.engine()?.clone();
        let unknown = || Error::SessionUnavailable {
            reason: format!(
                "no kept session `{id}` on this daemon (Client::kept_sessions lists them)"
            ),
        };
        let Some(found) = engine.inspect_stopped(id).await? else {
            return Err(unknown());
        };
        let is_kept = found.labels.get(labels::KEPT).map(String::as_str) == Some("true")
            && found.labels.get(labels::KIND).map(String::as_str) == Some("session");
        if !is_kept {
            return Err(unknown());
        }
        // Running: its agent outlived its host and waits for another to
        // attach (one at a time: two hosts of one agent would mix their
        // requests).
        let checkpoint = if found.running {
            None
        } else {
            engine
                .checkpoints(id)
                .await?
                .into_iter()
                .find(|name| name.starts_with("dockhand-"))
        };
        let token = found
            .labels
            .get(labels::SCRATCH)
            .cloned()
            .unwrap_or_default();
        // A memory checkpoint is taken only as it was sealed when paused,
        // by whichever process paused it (see `KeptSeals`).
        let sealed = match &checkpoint {
            Some(name) if engine.shares_filesystem() => {
                let path = engine.checkpoint_path(id, name).await?;
                let now = seal(&path).map_err(|e| Error::io("reading a kept checkpoint", e))?;
                let refused = |reason: String| {
                    Error::Checkpoint {
                    operation: "resume",
                    reason,
                    state: "the kept session is unchanged; remove it (Client::remove_kept_session) if it cannot be trusted".into(),
                }
                };
                match KeptSeals::new(self.cache_dir()).check(id, name, &now) {
                    Some(true) => Some(now),
                    Some(false) => {
                        return Err(refused(
                            "the checkpoint's files were changed or replaced after the pause".into(),
                        ))
                    }
                    None => {
                        return Err(refused(format!(
                            "no seal of this checkpoint in {}: it was paused by a process with another cache directory (ClientBuilder::cache_dir), or its seal was lost; its memory cannot be vouched for",
                            self.cache_dir().display()
                        )))
                    }
                }
            }
            _ => None,
        };
        // Refused while another client holds it (see `hold`).
        let held = super::hold::hold_kept(self.cache_dir(), id)?;
        let session = self.session(config.keep(true));
        *lock(&session.inner.kept_hold) = Some(held);
        let mode = if checkpoint.is_some() {
            PauseMode::Memory
        } else {
            PauseMode::Filesystem
        };
        *lock(&session.inner.parked) = Some(Parked {
            held: Held::Container(ContainerGuard::adopt(engine, id.to_string(), token)),
            egress: None,
            mode,
            carry: (checkpoint.is_some() || found.running).then(|| Carry {
                routes: Arc::new(Mutex::new(Some(HashMap::new()))),
                // Above any id the agent's earlier host may have left running.
                next_id: 1 << 40,
            }),
            checkpoint,
            seal: sealed,
            live: found.running,
            since: SystemTime::now(),
        });
        {
            let mut status = lock(&session.inner.status);
            status.life.state = State::Paused;
            status.life.container_id = Some(id.to_string());
            status.settled = true;
        }
        Ok(session)
    }

    /// Kept sessions' containers on this daemon: running, paused or
    /// stopped, with their age. Only [`Session::close`] (or
    /// [`Client::remove_kept_session`]) removes them; `reap` leaves them.
    pub async fn kept_sessions(&self) -> Result<Vec<KeptSession>> {
        let Ok(engine) = self.engine() else {
            return self.kept_stored_list().await;
        };
        let mut kept = Vec::new();
        for (id, l) in engine.list_managed_containers().await? {
            if l.get(labels::KEPT).map(String::as_str) != Some("true") {
                continue;
            }
            let Some(found) = engine.inspect_stopped(&id).await? else {
                continue;
            };
            let state = if found.running {
                "running".to_string()
            } else if engine
                .checkpoints(&id)
                .await
                .unwrap_or_default()
                .iter()
                .any(|n| n.starts_with("dockhand-"))
            {
                "paused (memory)".to_string()
            } else {
                "stopped (files)".to_string()
            };
            kept.push(KeptSession {
                name: l.get("dev.dockhand.session-name").cloned(),
                since: (!found.running).then_some(found.finished_at).flatten(),
                id,
                state,
            });
        }
        Ok(kept)
    }

    /// Removes a kept session's container (its checkpoints and scratch
    /// volumes with it); one that is gone already is fine.
    pub async fn remove_kept_session(&self, id: &str) -> Result<()> {
        let Ok(engine) = self.engine() else {
            return self.runs_on().remove_kept_files(id).await;
        };
        let Some(found) = engine.inspect_stopped(id).await? else {
            return Ok(());
        };
        if found.labels.get(labels::KEPT).map(String::as_str) != Some("true") {
            return Err(Error::SessionUnavailable {
                reason: format!("`{id}` is not a kept session's container"),
            });
        }
        engine.remove_container(id, &found.labels).await?;
        KeptSeals::new(self.cache_dir()).forget(id);
        Ok(())
    }
}
