//! [`Session`]: a persistent container an agent works in.

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde::Serialize;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::api::{ExecOptions, ExecResult, SessionApi};
use super::config::{EnvValue, SessionConfig, SetupStep, Snapshot};
use super::paths;
use super::protocol::{self, b64, unb64, DirEntry, Reply, Request};
use crate::client::Client;
use crate::codemode::protocol::LineBuffer;
use crate::engine::{ContainerGuard, ContainerSpec, LogChunk};
use crate::error::{Error, FileErrorKind, Result};
use crate::lifecycle::{State, Tracked};
use crate::sandbox::confine;
use crate::util::{lock, push_tail};

/// The agent program, uploaded into each session's container.
pub const AGENT: &str = include_str!("../../../images/session/agent.py");
const AGENT_DIR: &str = "/var/inputs";
const AGENT_PATH: &str = "/var/inputs/.dockhand/session-agent.py";

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

/// What [`Session::describe`] reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
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

struct Status {
    life: Tracked,
    commands: u64,
    /// Requests under way; the state is `running` while there are any.
    in_flight: u32,
    snapshots: Vec<String>,
}

type Routes = Arc<Mutex<HashMap<u64, mpsc::UnboundedSender<Reply>>>>;

/// A live connection to the agent.
struct Conn {
    container: Mutex<Option<ContainerGuard>>,
    container_id: String,
    writer: tokio::sync::Mutex<Pin<Box<dyn AsyncWrite + Send>>>,
    routes: Routes,
    reader: tokio::task::JoinHandle<()>,
    next_id: AtomicU64,
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

struct Inner {
    client: Client,
    config: SessionConfig,
    status: Mutex<Status>,
    conn: Mutex<Option<Arc<Conn>>>,
    start_lock: tokio::sync::Mutex<()>,
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
        Session {
            inner: Arc::new(Inner {
                client: self.clone(),
                config,
                status: Mutex::new(Status {
                    life: Tracked::new(),
                    commands: 0,
                    in_flight: 0,
                    snapshots: Vec::new(),
                }),
                conn: Mutex::new(None),
                start_lock: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// Snapshots taken by any session (images labelled as such).
    pub async fn snapshots(&self) -> Result<Vec<Snapshot>> {
        let images = self.engine().list_managed_images("snapshot").await?;
        Ok(images
            .into_iter()
            .flat_map(|(id, tags)| {
                tags.into_iter().map(move |image| Snapshot {
                    image,
                    id: id.clone(),
                })
            })
            .collect())
    }

    /// Removes a snapshot image.
    pub async fn remove_snapshot(&self, snapshot: &Snapshot) -> Result<()> {
        self.engine().remove_image(&snapshot.image).await
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

    /// Id, state, image, limits, commands run, snapshots.
    pub fn describe(&self) -> SessionDescription {
        let s = lock(&self.inner.status);
        let c = &self.inner.config;
        SessionDescription {
            container_id: s.life.container_id.clone(),
            state: s.life.state,
            image: s.life.image.clone(),
            workspace: c.workspace.clone(),
            memory_bytes: c.resources.memory_bytes,
            cpus: c.resources.cpus,
            commands: s.commands,
            snapshots: s.snapshots.clone(),
            last_error: s.life.last_error.clone(),
        }
    }

    fn set_state(&self, to: State) -> Result<()> {
        lock(&self.inner.status).life.transition(to)
    }

    fn fail(&self, why: String) {
        {
            let mut s = lock(&self.inner.status);
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
        *lock(&self.inner.conn) = Some(conn);
        self.set_state(State::Idle)?;
        for step in self.inner.config.setup.clone() {
            let outcome = match step {
                SetupStep::Command(command) => match self.exec(&command).await {
                    Ok(r) if r.success() => Ok(()),
                    Ok(r) => Err(Error::spec(
                        "session setup",
                        format!(
                            "`{command}` exited with {}: {}",
                            r.exit_code,
                            r.stderr.trim()
                        ),
                    )),
                    Err(e) => Err(e),
                },
                SetupStep::Hook(hook) => hook(self.clone()).await,
            };
            if let Err(e) = outcome {
                self.teardown().await;
                self.fail(format!("setup failed: {e}"));
                return Err(e);
            }
        }
        Ok(())
    }

    async fn launch(&self) -> Result<Arc<Conn>> {
        let c = &self.inner.config;
        for m in &c.mounts {
            if !m.container_path.starts_with('/') || !m.host_path.starts_with('/') {
                return Err(Error::spec(
                    "session",
                    format!(
                        "mount {} -> {}: both paths must be absolute",
                        m.host_path, m.container_path
                    ),
                ));
            }
        }
        if !c.workspace.starts_with('/') || c.workspace == "/" {
            return Err(Error::spec(
                "session",
                format!(
                    "workspace `{}` must be an absolute directory other than /",
                    c.workspace
                ),
            ));
        }
        let client = &self.inner.client;
        let image = client.images().resolve(&c.image).await?;
        lock(&self.inner.status).life.image = Some(image.reference.clone());
        let engine = client.engine();
        let mut env = vec![
            "HOME=/tmp".to_string(),
            "PYTHONUNBUFFERED=1".to_string(),
            format!("DOCKHAND_WORKSPACE={}", c.workspace),
            format!("DOCKHAND_ROOTS={}", c.roots().join(":")),
        ];
        // Lazy values are resolved now, when the session is created.
        for (name, value) in &c.env {
            let value = match value {
                EnvValue::Plain(v) => v.clone(),
                EnvValue::Lazy(f) => f(),
            };
            env.push(format!("{name}={value}"));
        }
        let mut labels = HashMap::new();
        if let Some(name) = &c.name {
            labels.insert("dev.dockhand.session-name".to_string(), name.clone());
        }
        let mut spec = ContainerSpec {
            image: image.reference.clone(),
            cmd: vec!["python3".into(), "-u".into(), AGENT_PATH.into()],
            entrypoint: Some(Vec::new()),
            env,
            working_dir: Some(c.workspace.clone()),
            kind: "session",
            extra_labels: labels,
            scratch_volumes: vec![AGENT_DIR.into()],
            mounts: c.mounts.clone(),
            open_stdin: true,
            no_log: true,
            // The agent exits when its stdin closes, as it does when the owner dies.
            auto_remove: true,
            ..Default::default()
        };
        let h = &c.hardening;
        confine(&mut spec, &c.resources, h, &c.network);
        if !h.read_only_root {
            // A writable root keeps /tmp in the filesystem, so snapshots hold it.
            spec.tmpfs.clear();
        }
        let container = engine.create_container(&spec).await?;
        let id = container.id().to_string();
        engine
            .upload_file(&id, AGENT_DIR, ".dockhand/session-agent.py", AGENT)
            .await?;
        if !h.read_only_root {
            engine
                .upload_archive(
                    &id,
                    "/",
                    Bytes::from(workspace_tar(&c.workspace, h.owner_ids())?),
                )
                .await?;
        }
        let attached = engine.attach(&id).await?;
        engine.start_container(&id).await?;

        let routes: Routes = Arc::default();
        let (ready_tx, mut ready_rx) = mpsc::unbounded_channel();
        let reader = tokio::spawn(read_replies(attached.output, routes.clone(), ready_tx));
        let conn = Arc::new(Conn {
            container: Mutex::new(Some(container)),
            container_id: id,
            writer: tokio::sync::Mutex::new(attached.input),
            routes,
            reader,
            next_id: AtomicU64::new(1),
        });
        match tokio::time::timeout(Duration::from_secs(60), ready_rx.recv()).await {
            Ok(Some(Ok(()))) => Ok(conn),
            Ok(Some(Err(stderr))) => Err(Error::SessionUnavailable {
                reason: format!("the session agent exited: {}", stderr.trim()),
            }),
            Ok(None) => Err(Error::SessionUnavailable {
                reason: "the session agent exited before it was ready".into(),
            }),
            Err(_) => Err(Error::SessionUnavailable {
                reason: "the session agent did not start within 60 s (is python3 in the image?)"
                    .into(),
            }),
        }
    }

    fn conn(&self) -> Result<Arc<Conn>> {
        lock(&self.inner.conn)
            .clone()
            .ok_or_else(|| Error::SessionUnavailable {
                reason: format!("the session is `{}`; start it first", self.state()),
            })
    }

    /// Marks a request as under way until the returned guard drops: a
    /// dropped call must not leave the session `running`.
    fn busy(&self) -> Result<Busy> {
        self.begin()?;
        Ok(Busy(self.clone()))
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
                    reason: format!("the session is `{other}`; start it first"),
                });
            }
        }
        Ok(())
    }

    fn end(&self) {
        let mut s = lock(&self.inner.status);
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
        let conn = self.conn()?;
        let id = conn.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        lock(&conn.routes).insert(id, tx);
        let line = protocol::encode(&build(id));
        let mut writer = conn.writer.lock().await;
        let written = async {
            writer.write_all(&line).await?;
            writer.flush().await
        }
        .await;
        if let Err(e) = written {
            lock(&conn.routes).remove(&id);
            return Err(Error::io("writing to the session agent", e));
        }
        Ok(rx)
    }

    /// The one final reply of a file request.
    async fn file_request(
        &self,
        path: &str,
        build: impl FnOnce(u64, String) -> Request,
    ) -> Result<Reply> {
        let c = &self.inner.config;
        let resolved =
            paths::resolve(path, &c.workspace, &c.roots()).ok_or_else(|| Error::SessionFile {
                path: path.to_string(),
                kind: FileErrorKind::OutsideSession,
                message: format!(
                    "outside the session's allowed paths ({})",
                    c.roots().join(", ")
                ),
            })?;
        let _busy = self.busy()?;
        let limit = c.request_timeout;
        let mut rx = self.request(|id| build(id, resolved)).await?;
        match tokio::time::timeout(limit, rx.recv()).await {
            Err(_) => Err(self.unanswered("a file request", limit)),
            Ok(Some(Reply::Error { kind, message, .. })) => Err(Error::SessionFile {
                path: path.to_string(),
                kind: FileErrorKind::from_agent(&kind),
                message,
            }),
            Ok(Some(reply)) => Ok(reply),
            Ok(None) => Err(self.gone()),
        }
    }

    fn gone(&self) -> Error {
        let why = "the session's container or agent stopped".to_string();
        self.fail(why.clone());
        Error::SessionUnavailable { reason: why }
    }

    /// Runs a command and streams its output; the last event is the exit.
    /// A timeout kills the command's process group and ends the stream with
    /// [`Error::Timeout`]; the session survives.
    pub async fn exec_stream(
        &self,
        command: &str,
        options: ExecOptions,
    ) -> Result<impl Stream<Item = Result<ExecEvent>> + Send + 'static> {
        let busy = self.busy()?;
        let started = Instant::now();
        let timeout = options.timeout.or(self.inner.config.exec_timeout);
        let rx = self.send_exec(command, &options, timeout, true).await?;
        let deadline = timeout.map(|t| started + t + exec_grace(t));
        Ok(futures::stream::unfold(
            Some((rx, busy, started)),
            move |state| async move {
                let (mut rx, busy, started) = state?;
                let next = match deadline {
                    None => Ok(rx.recv().await),
                    Some(at) => tokio::time::timeout_at(at.into(), rx.recv()).await,
                };
                let session = busy.0.clone();
                match next {
                    Ok(Some(Reply::Chunk { stream, data, .. })) => {
                        let bytes = Bytes::from(unb64(&data).unwrap_or_default());
                        let event = if stream == "stderr" {
                            ExecEvent::Stderr(bytes)
                        } else {
                            ExecEvent::Stdout(bytes)
                        };
                        Some((Ok(event), Some((rx, busy, started))))
                    }
                    Ok(Some(reply)) => {
                        drop(busy);
                        let out = session.finish_exec(reply, started, timeout);
                        Some((out.map(ExecEvent::Exit), None))
                    }
                    Ok(None) => {
                        drop(busy);
                        Some((Err(session.gone()), None))
                    }
                    Err(_) => {
                        drop(busy);
                        let limit = timeout.map(|t| t + exec_grace(t)).unwrap_or_default();
                        Some((Err(session.unanswered("a command", limit)), None))
                    }
                }
            },
        ))
    }

    async fn send_exec(
        &self,
        command: &str,
        options: &ExecOptions,
        timeout: Option<Duration>,
        stream: bool,
    ) -> Result<mpsc::UnboundedReceiver<Reply>> {
        let c = &self.inner.config;
        let cwd =
            match &options.cwd {
                None => None,
                Some(dir) => Some(paths::resolve(dir, &c.workspace, &c.roots()).ok_or_else(
                    || Error::SessionFile {
                        path: dir.clone(),
                        kind: FileErrorKind::OutsideSession,
                        message: "working directory outside the session's allowed paths".into(),
                    },
                )?),
            };
        let env: BTreeMap<String, String> = options.env.iter().cloned().collect();
        let stdin = options.stdin.as_deref().map(b64);
        let limit = c.output_limit;
        self.request(|id| Request::Exec {
            id,
            command: command.to_string(),
            cwd,
            env,
            stdin,
            timeout_s: timeout.map(|t| t.as_secs_f64()),
            output_limit: limit,
            stream,
        })
        .await
    }

    fn finish_exec(
        &self,
        reply: Reply,
        started: Instant,
        timeout: Option<Duration>,
    ) -> Result<ExecResult> {
        match reply {
            Reply::Exit {
                code,
                timed_out,
                stdout,
                stderr,
                stdout_truncated,
                stderr_truncated,
                ..
            } => {
                lock(&self.inner.status).commands += 1;
                let stdout =
                    String::from_utf8_lossy(&unb64(&stdout).unwrap_or_default()).into_owned();
                let stderr =
                    String::from_utf8_lossy(&unb64(&stderr).unwrap_or_default()).into_owned();
                if timed_out {
                    return Err(Error::Timeout {
                        timeout: timeout.unwrap_or_default(),
                        stdout,
                        stderr,
                    });
                }
                Ok(ExecResult {
                    exit_code: code,
                    stdout,
                    stderr,
                    stdout_truncated,
                    stderr_truncated,
                    duration: started.elapsed(),
                })
            }
            Reply::Error { kind, message, .. } => Err(Error::SessionFile {
                path: String::new(),
                kind: FileErrorKind::from_agent(&kind),
                message,
            }),
            other => Err(Error::SessionUnavailable {
                reason: format!("unexpected reply from the session agent: {other:?}"),
            }),
        }
    }

    /// Commits the container's filesystem (the workspace included, mounts not)
    /// to a labelled image that a new session can start from.
    pub async fn snapshot(&self) -> Result<Snapshot> {
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
        let labels = HashMap::from([(
            "dev.dockhand.snapshot-of".to_string(),
            conn.container_id.clone(),
        )]);
        let id = self
            .inner
            .client
            .engine()
            .commit_container(&conn.container_id, &image, "snapshot", labels)
            .await?;
        lock(&self.inner.status).snapshots.push(image.clone());
        Ok(Snapshot { image, id })
    }

    async fn teardown(&self) {
        let conn = lock(&self.inner.conn).take();
        if let Some(conn) = conn {
            let guard = lock(&conn.container).take();
            if let Some(guard) = guard {
                if let Err(e) = guard.remove().await {
                    tracing::warn!(error = %e, "removing the session container failed");
                }
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
        self.teardown().await;
        let life = &mut lock(&self.inner.status).life;
        life.state = State::Closed;
        life.container_id = None;
        Ok(snapshot)
    }
}

/// The workspace directory as a tar to extract at `/`: parents root-owned,
/// the workspace itself owned by the session's user.
fn workspace_tar(workspace: &str, (uid, gid): (u64, u64)) -> Result<Vec<u8>> {
    let parts: Vec<&str> = workspace
        .trim_matches('/')
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
    let mut builder = tar::Builder::new(Vec::new());
    let wrap = |e| Error::io("building the workspace archive", e);
    for i in 0..parts.len() {
        let path = format!("{}/", parts[..=i].join("/"));
        let leaf = i + 1 == parts.len();
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_size(0);
        h.set_mode(0o755);
        h.set_mtime(0);
        let (owner, group) = if leaf { (uid, gid) } else { (0, 0) };
        h.set_uid(owner);
        h.set_gid(group);
        h.set_path(&path).map_err(wrap)?;
        h.set_cksum();
        builder.append(&h, std::io::empty()).map_err(wrap)?;
    }
    builder.into_inner().map_err(wrap)
}

/// Routes the agent's replies to the requests waiting for them.
async fn read_replies(
    mut output: Pin<Box<dyn Stream<Item = Result<LogChunk>> + Send>>,
    routes: Routes,
    ready: mpsc::UnboundedSender<std::result::Result<(), String>>,
) {
    let mut lines = LineBuffer::default();
    let mut stderr = String::new();
    while let Some(chunk) = output.next().await {
        let bytes = match chunk {
            Ok(LogChunk::Stdout(b)) => b,
            Ok(LogChunk::Stderr(b)) => {
                push_tail(&mut stderr, &b, 4096);
                continue;
            }
            Err(_) => break,
        };
        for line in lines.push(&bytes) {
            let reply: Reply = match serde_json::from_slice(&line) {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, "unreadable line from the session agent");
                    continue;
                }
            };
            let Some(id) = reply.id() else {
                let _ = ready.send(Ok(()));
                continue;
            };
            let mut routes = lock(&routes);
            let done = reply.is_final();
            if let Some(tx) = routes.get(&id) {
                let _ = tx.send(reply);
            }
            if done {
                routes.remove(&id);
            }
        }
    }
    let _ = ready.send(Err(stderr));
    // Dropping the senders tells every waiting request that the agent is gone.
    lock(&routes).clear();
}

impl SessionApi for Session {
    async fn exec_with(&self, command: &str, options: ExecOptions) -> Result<ExecResult> {
        let busy = self.busy()?;
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
        match self
            .file_request(path, |id, path| Request::Read {
                id,
                path,
                max_bytes: self.inner.config.read_limit,
            })
            .await?
        {
            Reply::Ok {
                data: Some(data), ..
            } => unb64(&data).map_err(|e| Error::SessionUnavailable { reason: e }),
            _ => Ok(Vec::new()),
        }
    }

    async fn write_file(&self, path: &str, data: &[u8]) -> Result<()> {
        let data = b64(data);
        self.file_request(path, |id, path| Request::Write { id, path, data })
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

/// How long past a command's own timeout the host waits for the agent's
/// answer (the agent answers about 0.5 s after killing a command).
fn exec_grace(timeout: Duration) -> Duration {
    Duration::from_secs(1) + timeout / 10
}

/// A request under way; ends it when dropped (see [`Session::busy`]).
struct Busy(Session);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.end();
    }
}

#[cfg(test)]
mod tests {
    use super::workspace_tar;

    #[test]
    fn workspace_archive_owns_only_the_leaf() {
        let tar = workspace_tar("/home/agent/work", (65534, 65534)).unwrap();
        let mut a = tar::Archive::new(tar.as_slice());
        let entries: Vec<(String, u64)> = a
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.path().unwrap().to_string_lossy().into_owned(),
                    e.header().uid().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            entries,
            [
                ("home/".to_string(), 0),
                ("home/agent/".to_string(), 0),
                ("home/agent/work/".to_string(), 65534)
            ]
        );
    }
}
