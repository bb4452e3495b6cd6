//! [`Session`]: a persistent container an agent works in.

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

mod agent;
pub use crate::image::agent::FROM_IMAGE_ENV as AGENT_FROM_IMAGE_ENV;
pub(crate) use agent::AgentProgram;
mod channel;
pub(crate) use channel::Channel;
mod commit;
mod exec;
use exec::exec_grace;
mod describe;
mod download;
mod egress;
mod files;
mod fork;
mod hold;
mod launch;
#[cfg(feature = "kubernetes")]
pub(crate) mod on_cluster;
mod pause;
mod ports;
mod process;
mod setup;
mod spec;
mod start;
mod stored;
mod upload;
mod watch;
pub use describe::SessionDescription;
pub use fork::MAX_FORKS;
pub use pause::{KeptSession, PauseMode, Paused};
pub use ports::{ExposedPort, PortStream};
pub use process::{ProcessControl, SpawnOptions, Spawned};
pub use setup::SetupHook;
pub use watch::{FileEvent, FileEventKind, FileWatch};

use super::api::{ExecOptions, ExecResult, SessionApi};
use super::config::{EnvValue, SessionConfig, SetupStep, Snapshot};
use super::paths;
use super::protocol::{self, b64, unb64, DirEntry, Reply, Request};
use crate::backend::Held;
use crate::client::Client;
use crate::engine::{ContainerSpec, LogChunk};
use crate::error::{Error, FileErrorKind, Result};
use crate::lifecycle::{State, Tracked};
use crate::sandbox::{confine, Network};
use crate::util::LineBuffer;
use crate::util::{lock, push_tail};

const AGENT_DIR: &str = "/var/inputs";
/// Where the agent and the session's helpers are installed: root-owned and
/// read-only to the session's user, on the container's own volume.
pub(crate) const HELPERS_DIR: &str = "/var/inputs/.dockhand";

/// One event of a streaming command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecEvent {
    /// Bytes written to stdout.
    Stdout(Bytes),
    /// Bytes written to stderr.
    Stderr(Bytes),
    /// The command ended.
    Exit(ExecResult),
}

struct Status {
    life: Tracked,
    commands: u64,
    /// Requests under way; the state is `running` while there are any.
    in_flight: u32,
    snapshots: Vec<String>,
    /// The checkpoint the running container was restored from.
    checkpoint: Option<String>,
    /// Started and set up (or adopted): a kept session is left behind
    /// only from here on; one dropped before is removed.
    settled: bool,
    /// When the last request ended (the idle timer's clock).
    last_active: Instant,
}

/// Where each request's replies go; `None` once the agent is gone, so a
/// request sent after that fails at once instead of waiting for its limit.
type Routes = Arc<Mutex<Option<HashMap<u64, mpsc::UnboundedSender<Reply>>>>>;

/// A live connection to the agent.
struct Conn {
    holder: Mutex<Option<Held>>,
    container_id: String,
    writer: tokio::sync::Mutex<Pin<Box<dyn AsyncWrite + Send>>>,
    routes: Routes,
    reader: tokio::task::JoinHandle<()>,
    next_id: AtomicU64,
    /// The way out through the egress gateway, under a policy.
    egress: tokio::sync::Mutex<Option<crate::gateway::Lease>>,
    /// Set before a memory pause: the agent's processes live on in the
    /// checkpoint, so its stopping must not end the routes of their replies.
    parking: Arc<std::sync::atomic::AtomicBool>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Conn {
    /// Writes one whole request line to the agent, on a task of its own: a
    /// caller dropped mid-write (a cancelled upload, say) must not leave
    /// half a line for the next request to be glued to, which would cost
    /// both. `Ok(None)` when the agent took no line within `limit`.
    async fn send_line(self: &Arc<Self>, line: Vec<u8>, limit: Duration) -> Result<Option<()>> {
        let conn = self.clone();
        let write = tokio::spawn(async move {
            tokio::time::timeout(limit, async {
                let mut writer = conn.writer.lock().await;
                writer.write_all(&line).await?;
                writer.flush().await
            })
            .await
        });
        match write.await {
            Ok(Ok(written)) => written
                .map(Some)
                .map_err(|e| Error::io("writing to the session agent", e)),
            Ok(Err(_)) => Ok(None),
            Err(e) => Err(Error::io(
                "writing to the session agent",
                std::io::Error::other(e.to_string()),
            )),
        }
    }
}

struct Inner {
    client: Client,
    config: SessionConfig,
    status: Mutex<Status>,
    conn: Mutex<Option<Arc<Conn>>>,
    /// Secret names and values of the running container, for redaction.
    secrets: Mutex<Vec<(String, String)>>,
    start_lock: tokio::sync::Mutex<()>,
    /// The agent-sandbox pool a pooled session claims its pod from.
    #[cfg_attr(not(feature = "kubernetes"), allow(dead_code))]
    claims: crate::backend::Claims,
    /// The stopped container of a paused session, and what resumes it.
    parked: Mutex<Option<pause::Parked>>,
    /// How the running container was made (for forks).
    launched: Mutex<Option<launch::Launched>>,
    /// An image this session was forked from, removed with the last fork.
    fork_image: Mutex<Option<Arc<fork::ForkImage>>>,
    /// The image of the files of a container moved at a pause (see
    /// `relocate`), removed with the container.
    relocated: Mutex<Option<String>>,
    /// This handle's hold of a kept session (see `hold`): released when
    /// the last clone goes.
    kept_hold: Mutex<Option<hold::Hold>>,
    /// Where a pausable session keeps its files apart from its pod (a
    /// cluster's claim; see `stored`), removed with the session.
    files: Mutex<Option<crate::backend::FilesClaim>>,
    /// The claim a fork's files are copied from, at its start.
    fork_from: Mutex<Option<String>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if !self.config.keep || !lock(&self.status).settled {
            return;
        }
        // A kept session outlives its handle: its container stays (its
        // agent stops with this process, leaving its files).
        let conn = lock(&self.conn).take();
        if let Some(held) = conn.and_then(|c| lock(&c.holder).take()) {
            held.release();
        }
        if let Some(parked) = lock(&self.parked).take() {
            parked.held.release();
        }
        if let Some(files) = lock(&self.files).take() {
            files.release();
        }
    }
}

/// A persistent container an agent works in: shell commands, files, edits,
/// snapshots. Cheap to clone (clones share the container); the container is
/// removed by [`Session::close`], or when the last clone is dropped.
///
/// ```no_run
/// # async fn demo() -> dockhand::Result<()> {
/// use dockhand::session::{SessionApi, SessionConfig};
/// let client = dockhand::Client::connect().await?;
/// let s = client.session(SessionConfig::new().workspace("/workspace"));
/// s.start().await?;
/// s.write_file("a.py", b"print(1)\n").await?;
/// let r = s.exec("python3 a.py").await?;
/// assert_eq!((r.exit_code, r.stdout.as_str()), (0, "1\n"));
/// s.close().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("state", &self.state())
            .field("workspace", &self.inner.config.workspace)
            .finish()
    }
}

impl Client {
    /// A session with this configuration, in state `init` (call `start`).
    pub fn session(&self, config: SessionConfig) -> Session {
        self.session_from(config, None)
    }

    /// A session that, on a cluster with `claims`, starts in a pod claimed
    /// from that agent-sandbox pool (or its own pod, when none is bound in time).
    pub(crate) fn session_from(
        &self,
        config: SessionConfig,
        claims: crate::backend::Claims,
    ) -> Session {
        Session {
            inner: Arc::new(Inner {
                client: self.clone(),
                config,
                status: Mutex::new(Status {
                    life: Tracked::new(),
                    commands: 0,
                    in_flight: 0,
                    snapshots: Vec::new(),
                    checkpoint: None,
                    settled: false,
                    last_active: Instant::now(),
                }),
                conn: Mutex::new(None),
                secrets: Mutex::default(),
                start_lock: tokio::sync::Mutex::new(()),
                claims,
                parked: Mutex::new(None),
                launched: Mutex::new(None),
                fork_image: Mutex::new(None),
                relocated: Mutex::new(None),
                kept_hold: Mutex::new(None),
                files: Mutex::new(None),
                fork_from: Mutex::new(None),
            }),
        }
    }

    /// Snapshots taken by any session (images labelled as such; on a
    /// cluster, snapshots' claims).
    pub async fn snapshots(&self) -> Result<Vec<Snapshot>> {
        let Ok(engine) = self.engine() else {
            return self.stored_snapshots().await;
        };
        let images = engine.list_managed_images("snapshot").await?;
        Ok(images
            .into_iter()
            .flat_map(|(id, tags)| {
                tags.into_iter().map(move |image| Snapshot {
                    image,
                    id: id.clone(),
                    files: None,
                })
            })
            .collect())
    }

    /// Removes a snapshot image (on a cluster, its claim).
    pub async fn remove_snapshot(&self, snapshot: &Snapshot) -> Result<()> {
        if let Some(files) = &snapshot.files {
            return self.runs_on().remove_snapshot_files(files).await;
        }
        self.engine()?.remove_image(&snapshot.image).await
    }
}

impl Session {
    /// The lifecycle state.
    pub fn state(&self) -> State {
        lock(&self.inner.status).life.state
    }

    /// The configuration.
    pub fn config(&self) -> &SessionConfig {
        &self.inner.config
    }

    fn set_state(&self, to: State) -> Result<()> {
        lock(&self.inner.status).life.transition(to)
    }

    fn fail(&self, why: String) {
        {
            let mut s = lock(&self.inner.status);
            // A paused session's agent stopped on purpose.
            if s.life.state == State::Paused {
                return;
            }
            s.life.fail(why);
            s.in_flight = 0;
        }
        *lock(&self.inner.conn) = None;
    }

    /// Creates and starts the container, then runs the setup steps (from
    /// `init`, or again after `error`).
    pub async fn start(&self) -> Result<()> {
        let _one_at_a_time = self.inner.start_lock.lock().await;
        lock(&self.inner.status).life.check_startable()?;
        self.set_state(State::Running)?;
        let launched = self.launch().await;
        let conn = match launched {
            Ok(conn) => conn,
            Err(e) => {
                self.fail(format!("start failed: {e}"));
                return Err(e);
            }
        };
        lock(&self.inner.status).life.container_id = Some(conn.container_id.clone());
        self.hold_if_kept(&conn.container_id);
        *lock(&self.inner.conn) = Some(conn);
        self.set_state(State::Idle)?;
        for step in self.inner.config.setup.clone() {
            let outcome = match step {
                SetupStep::Command(command) => match self.exec(&command).await {
                    Ok(r) if r.success() => Ok(()),
                    Ok(r) => Err(Error::SetupFailed {
                        hint: match self.inner.config.network {
                            Network::None => crate::error::offline_hint(
                                &format!("{}{}", r.stdout, r.stderr),
                                "`SessionConfig::network(true)`",
                            ),
                            _ => None,
                        },
                        step: command,
                        exit_code: r.exit_code,
                        stderr_tail: crate::sandbox::capture_tail(r.stderr.trim(), 4096),
                    }),
                    Err(e) => Err(e),
                },
                SetupStep::Hook(hook) => match hook.downcast_ref::<SetupHook>() {
                    Some(hook) => hook(self.clone()).await,
                    None => Err(Error::spec("session", "a setup step of an unknown kind")),
                },
            };
            if let Err(e) = outcome {
                self.teardown().await;
                self.fail(format!("setup failed: {e}"));
                return Err(e);
            }
        }
        {
            let mut status = lock(&self.inner.status);
            status.settled = true;
            status.last_active = Instant::now();
        }
        if let Some((idle, mode)) = self.inner.config.auto_pause {
            tokio::spawn(pause::idle_timer(Arc::downgrade(&self.inner), idle, mode));
        }
        Ok(())
    }

    /// A kept session's container is held by this handle from its start
    /// (a new container: no one else can hold it).
    fn hold_if_kept(&self, container: &str) {
        if !self.inner.config.keep {
            return;
        }
        match hold::hold_kept(self.inner.client.cache_dir(), container) {
            Ok(hold) => *lock(&self.inner.kept_hold) = Some(hold),
            Err(e) => tracing::warn!(error = %e, "holding a kept session"),
        }
    }

    fn conn(&self) -> Result<Arc<Conn>> {
        lock(&self.inner.conn)
            .clone()
            .ok_or_else(|| Error::SessionUnavailable {
                reason: not_ready(self.state()),
            })
    }

    /// Marks a request as under way until the returned guard drops: a
    /// dropped call must not leave the session `running`.
    async fn busy(&self) -> Result<Busy> {
        self.wake().await?;
        self.begin()?;
        Ok(Busy(self.clone()))
    }

    /// Resumes a session paused by its idle timer (see
    /// [`SessionConfig::auto_pause`]) before a request; others stay as
    /// they are.
    async fn wake(&self) -> Result<()> {
        if self.state() == State::Paused && self.inner.config.auto_pause.is_some() {
            match self.resume().await {
                // Resumed by a request racing this one.
                Err(Error::InvalidTransition { .. }) if self.state() != State::Paused => {}
                other => other?,
            }
        }
        Ok(())
    }

    /// The session stopped answering within `limit`: it is of no more use
    /// (its container goes); `start` brings it back.
    fn unanswered(&self, what: &str, limit: Duration) -> Error {
        let reason = format!(
            "the session did not answer {what} within {limit:?} (its container may be paused or wedged); start it again"
        );
        self.fail(reason.clone());
        Error::SessionUnavailable { reason }
    }

    fn begin(&self) -> Result<()> {
        let mut s = lock(&self.inner.status);
        match s.life.state {
            State::Idle => {
                s.life.transition(State::Running)?;
                s.in_flight = 1;
            }
            State::Running if s.in_flight > 0 => s.in_flight += 1,
            other => {
                return Err(Error::SessionUnavailable {
                    reason: not_ready(other),
                });
            }
        }
        Ok(())
    }

    /// Traffic that is no request (a port's bytes) keeps the session from
    /// counting as idle.
    fn mark_active(&self) {
        lock(&self.inner.status).last_active = Instant::now();
    }

    fn end(&self) {
        let mut s = lock(&self.inner.status);
        s.last_active = Instant::now();
        if s.life.state == State::Running && s.in_flight > 0 {
            s.in_flight -= 1;
            if s.in_flight == 0 {
                s.life.state = State::Idle;
            }
        }
    }

    /// Sends a request; the receiver gets its replies.
    async fn request(
        &self,
        build: impl FnOnce(u64) -> Request,
    ) -> Result<mpsc::UnboundedReceiver<Reply>> {
        self.wake().await?;
        let conn = self.conn()?;
        let id = conn.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        match lock(&conn.routes).as_mut() {
            Some(routes) => routes.insert(id, tx),
            None => return Err(self.gone()),
        };
        let line = protocol::encode(&build(id));
        let limit = self.inner.config.request_timeout;
        let written = conn.send_line(line, limit).await;
        if !matches!(written, Ok(Some(()))) {
            if let Some(routes) = lock(&conn.routes).as_mut() {
                routes.remove(&id);
            }
        }
        match written {
            Ok(Some(())) => Ok(rx),
            Ok(None) => Err(self.unanswered("a request", limit)),
            Err(e) => Err(e),
        }
    }

    /// The one final reply of a file request.
    async fn file_request(
        &self,
        path: &str,
        build: impl FnOnce(u64, String) -> Request,
    ) -> Result<Reply> {
        let resolved = self.resolve_path(path, "outside")?;
        let _busy = self.busy().await?;
        let limit = self.inner.config.request_timeout;
        let mut rx = self.request(|id| build(id, resolved)).await?;
        match tokio::time::timeout(limit, rx.recv()).await {
            Err(_) => Err(self.unanswered("a file request", limit)),
            Ok(Some(Reply::Error { kind, message, .. })) => {
                Err(self.agent_error(path, &kind, message))
            }
            Ok(Some(reply)) => Ok(reply),
            Ok(None) => Err(self.gone()),
        }
    }

    /// `path` made absolute against the workspace, if it is under one of
    /// the allowed roots (a lexical check; the agent checks symbolic links).
    fn resolve_path(&self, path: &str, what: &str) -> Result<String> {
        let c = &self.inner.config;
        paths::resolve(path, &c.workspace, &c.roots()).ok_or_else(|| Error::SessionFile {
            path: path.to_string(),
            kind: FileErrorKind::OutsideSession,
            message: format!(
                "{what} the session's allowed paths ({})",
                c.roots().join(", ")
            ),
        })
    }

    /// The error for an agent's refusal of a request about `path`.
    fn agent_error(&self, path: &str, kind: &str, message: String) -> Error {
        if kind == "pids" {
            return Error::ProcessLimit {
                limit: self.inner.config.resources.pids,
                stdout: String::new(),
                stderr: message,
            };
        }
        Error::SessionFile {
            path: path.to_string(),
            kind: FileErrorKind::from_agent(kind),
            message,
        }
    }

    fn gone(&self) -> Error {
        let why = "the session's container or agent stopped".to_string();
        self.fail(why.clone());
        Error::SessionUnavailable { reason: why }
    }

    async fn teardown(&self) {
        let parked = lock(&self.inner.parked).take();
        if let Some(parked) = parked {
            let id = parked.held.id().to_string();
            parked.remove().await;
            self.end_shims(&id);
        }
        *lock(&self.inner.launched) = None;
        let conn = lock(&self.inner.conn).take();
        if let Some(conn) = conn {
            let guard = lock(&conn.holder).take();
            if let Some(guard) = guard {
                let id = guard.id().to_string();
                if let Err(e) = guard.remove().await {
                    tracing::warn!(error = %e, "removing the session container failed");
                }
                self.end_shims(&id);
            }
            let lease = conn.egress.lock().await.take();
            if let Some(lease) = lease {
                lease.close().await;
            }
        }
        // Its pod is gone or going: the claim goes once it has.
        let files = lock(&self.inner.files).take();
        if let Some(files) = files {
            if let Err(e) = files.remove().await {
                tracing::warn!(error = %e, "removing the session's files claim failed");
            }
        }
        let relocated = lock(&self.inner.relocated).take();
        if let (Some(image), Ok(engine)) = (relocated, self.inner.client.engine()) {
            let _ = engine.remove_image_if_unused(&image).await;
        }
    }

    /// A snapshot removed while this session ran from it stayed, untagged,
    /// for the session's container: with the container gone, such images
    /// go too (any that no container uses any more).
    async fn forget_removed_snapshot(&self, image: &str) {
        if !image.starts_with("dockhand/snapshot:") {
            return;
        }
        let Ok(engine) = self.inner.client.engine() else {
            return;
        };
        if let Ok(None) = engine.inspect_image(image).await {
            if let Err(e) = engine.prune_untagged("snapshot").await {
                tracing::warn!(error = %e, "removing a removed snapshot's image");
            }
        }
    }

    /// After a container of a session under gVisor is removed: its runtime
    /// shim, which a checkpoint or restore leaves running, is ended too (on
    /// a daemon of this machine; see `engine::end_orphaned_shims`).
    fn end_shims(&self, container: &str) {
        let gvisor = self.inner.config.isolation.runtime_name() == Some("runsc");
        let local = self
            .inner
            .client
            .engine()
            .is_ok_and(|engine| engine.shares_filesystem());
        if gvisor && local {
            let ended = crate::engine::end_orphaned_shims(container);
            if ended > 0 {
                tracing::debug!(
                    ended,
                    container,
                    "runtime shims of a removed container ended"
                );
            }
        }
    }

    /// Stops the container; `start` brings the session back (its files are lost
    /// unless snapshotted).
    pub async fn stop(&self) -> Result<()> {
        self.state().transition(State::Error)?;
        self.teardown().await;
        self.fail("stopped".into());
        Ok(())
    }

    /// Closes the session for good: snapshots it first when `persist` is on,
    /// then removes the container.
    pub async fn close(&self) -> Result<Option<Snapshot>> {
        self.state().transition(State::Closed)?;
        let snapshot = if self.inner.config.persist && lock(&self.inner.conn).is_some() {
            Some(self.snapshot().await?)
        } else {
            None
        };
        let (container, image) = {
            let status = lock(&self.inner.status);
            (status.life.container_id.clone(), status.life.image.clone())
        };
        self.teardown().await;
        if let Some(image) = image {
            self.forget_removed_snapshot(&image).await;
        }
        if let (true, Some(container)) = (self.inner.config.keep, container) {
            crate::engine::KeptSeals::new(self.inner.client.cache_dir()).forget(&container);
        }
        {
            let life = &mut lock(&self.inner.status).life;
            life.state = State::Closed;
            life.container_id = None;
        }
        let fork_image = lock(&self.inner.fork_image).take();
        if let Some(image) = fork_image {
            image.release().await;
        }
        Ok(snapshot)
    }
}

impl SessionApi for Session {
    async fn exec_with(&self, command: &str, options: ExecOptions) -> Result<ExecResult> {
        let busy = self.busy().await?;
        let started = Instant::now();
        let timeout = options.timeout.or(self.inner.config.exec_timeout);
        let mut rx = self.send_exec(command, &options, timeout, false).await?;
        let reply = match timeout {
            None => Ok(rx.recv().await),
            Some(t) => tokio::time::timeout(t + exec_grace(t), rx.recv()).await,
        };
        drop(busy);
        match reply {
            Ok(Some(reply)) => self.finish_exec(reply, started, timeout),
            Ok(None) => Err(self.gone()),
            Err(_) => Err(self.unanswered(
                "a command",
                timeout.map(|t| t + exec_grace(t)).unwrap_or_default(),
            )),
        }
    }

    async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        // In pieces: a large file costs no single request (nor reply line)
        // longer than one piece.
        let mut data = Vec::new();
        self.read_file_to(path, &mut data, self.inner.config.read_limit)
            .await?;
        Ok(data)
    }

    async fn write_file(&self, path: &str, data: &[u8]) -> Result<()> {
        let data = b64(data);
        self.file_request(path, |id, path| Request::Write {
            id,
            path,
            data,
            offset: None,
        })
        .await
        .map(|_| ())
    }

    async fn list_dir(&self, path: &str) -> Result<Vec<DirEntry>> {
        match self
            .file_request(path, |id, path| Request::List { id, path })
            .await?
        {
            Reply::Ok {
                entries: Some(entries),
                ..
            } => Ok(entries),
            _ => Ok(Vec::new()),
        }
    }

    async fn remove(&self, path: &str) -> Result<()> {
        self.file_request(path, |id, path| Request::Remove {
            id,
            path,
            recursive: true,
        })
        .await
        .map(|_| ())
    }
}

/// Why a session in `state` takes no request, and what brings it back.
fn not_ready(state: State) -> String {
    match state {
        State::Paused => "the session is `paused`; resume it first".into(),
        other => format!("the session is `{other}`; start it first"),
    }
}

/// A request under way; ends it when dropped (see [`Session::busy`]).
struct Busy(Session);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.end();
    }
}
