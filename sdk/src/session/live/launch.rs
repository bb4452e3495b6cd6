//! Starting a session's container and reading its agent's replies.

use super::*;
use crate::engine::{copy_checkpoint, Engine};
use crate::sandbox::{secrets_archive, SECRETS_DIR};

/// How a session's running container was made: what a fork of it is made
/// from (the same settings, its secrets' values included, kept in memory
/// only).
#[derive(Clone)]
pub(super) struct Launched {
    pub(super) spec: ContainerSpec,
    pub(super) file_secrets: Vec<(String, String)>,
    /// Secrets given as variables (see `SECRET_ENV_FILE`).
    pub(super) env_secrets: Vec<(String, String)>,
}

/// What a memory resume carries over: the routes of replies to requests
/// and channels whose processes live on in the checkpoint.
pub(super) struct Carry {
    pub(super) routes: Routes,
    pub(super) next_id: u64,
}

/// Speaks with the agent of the container `held` through `attached` until
/// the container stops: the attach stream can stay open after the container
/// is gone (removed from outside, say), so its end is watched too.
pub(super) async fn connect_container(
    engine: &Engine,
    held: Held,
    attached: crate::engine::Attached,
    egress: Option<crate::gateway::Lease>,
    carry: Option<Carry>,
) -> Result<Arc<Conn>> {
    let exited = {
        let (engine, id) = (engine.clone(), held.id().to_string());
        async move {
            let _ = engine.wait_container(&id).await;
        }
    };
    // Docker attaches before the container starts: no answer is lost.
    connect(
        held,
        attached.input,
        attached.output,
        exited,
        egress,
        carry,
        None,
    )
    .await
}

impl Session {
    /// Waits for a container restored or resumed by `coming` to answer,
    /// within the session's start limit; on a failure or at the limit the
    /// session fails (its container goes with the future) with `what`.
    pub(super) async fn come_up(
        &self,
        what: &str,
        coming: impl std::future::Future<Output = Result<Arc<Conn>>>,
    ) -> Result<Arc<Conn>> {
        let limit = self.inner.config.start_timeout;
        // On the heap: a restore's future is large, and the caller's
        // (a fork of several, a test's whole body) holds it.
        match tokio::time::timeout(limit, Box::pin(coming)).await {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(e)) => {
                self.fail(format!("{what} failed: {e}"));
                Err(e)
            }
            Err(_) => {
                let reason =
                    format!("{what} did not answer within {limit:?}; its container was removed");
                self.fail(reason.clone());
                Err(Error::SessionUnavailable { reason })
            }
        }
    }

    /// Once a container restored from `checkpoint` runs (its agent
    /// answered, so its runtime has read the checkpoint), containerd's
    /// unpacked copy of it goes (see `engine::remove_runtime_copies`); on a
    /// daemon on this machine only, where the copy is.
    pub(super) async fn forget_runtime_copies(
        &self,
        engine: &Engine,
        container: &str,
        checkpoint: &str,
    ) {
        if !engine.shares_filesystem() {
            return;
        }
        let Ok(dir) = engine.checkpoint_path(container, checkpoint).await else {
            return;
        };
        let removed =
            tokio::task::spawn_blocking(move || crate::engine::remove_runtime_copies(&dir)).await;
        if let Ok(n) = removed {
            tracing::debug!(n, container, "containerd's checkpoint copies removed");
        }
    }

    /// The session runs in `conn`'s container now, restored from
    /// `checkpoint` if it was (removed at the next pause: the runtime may
    /// still read it).
    pub(super) fn runs_in(&self, conn: Arc<Conn>, checkpoint: Option<String>) -> Result<()> {
        // A resume may have moved it into a new container: the hold follows.
        let moved = lock(&self.inner.status).life.container_id.as_deref()
            != Some(conn.container_id.as_str());
        if moved || lock(&self.inner.kept_hold).is_none() {
            self.hold_if_kept(&conn.container_id);
        }
        {
            let mut status = lock(&self.inner.status);
            status.life.container_id = Some(conn.container_id.clone());
            status.checkpoint = checkpoint;
            status.settled = true;
        }
        *lock(&self.inner.conn) = Some(conn);
        self.set_state(State::Idle)
    }
}

/// Speaks with the agent in `held` over `input` and `output` (its stdin
/// and attach stream) until `exited` resolves, once it said `ready`. An
/// agent restored from memory (`carry`) said `ready` long ago: it is
/// greeted, and says it again.
pub(super) async fn connect(
    held: Held,
    mut input: Pin<Box<dyn AsyncWrite + Send>>,
    output: Pin<Box<dyn Stream<Item = Result<LogChunk>> + Send>>,
    exited: impl std::future::Future<Output = ()> + Send + 'static,
    egress: Option<crate::gateway::Lease>,
    carry: Option<Carry>,
    regreet: Option<std::time::Duration>,
) -> Result<Arc<Conn>> {
    let greet = carry.is_some();
    let (routes, next_id) = match carry {
        Some(Carry { routes, next_id }) => (routes, next_id),
        None => (Arc::new(Mutex::new(Some(HashMap::new()))), 1),
    };
    let parking = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (ready_tx, mut ready_rx) = mpsc::unbounded_channel();
    let reader = tokio::spawn(read_replies(
        output,
        exited,
        routes.clone(),
        ready_tx,
        parking.clone(),
    ));
    if greet {
        input
            .write_all(b"{\"type\":\"hello\"}\n")
            .await
            .map_err(|e| Error::io("greeting the restored session agent", e))?;
        input
            .flush()
            .await
            .map_err(|e| Error::io("greeting the restored session agent", e))?;
    }
    let conn = Arc::new(Conn {
        container_id: held.id().to_string(),
        holder: Mutex::new(Some(held)),
        writer: tokio::sync::Mutex::new(input),
        routes,
        reader,
        next_id: AtomicU64::new(next_id),
        egress: tokio::sync::Mutex::new(egress),
        parking,
    });
    // On a cluster the attach wires stdout after stdin, so the answer to a
    // hello can miss the stream: greet again until one arrives.
    let ready = loop {
        let Some(every) = regreet else {
            break ready_rx.recv().await;
        };
        match tokio::time::timeout(every, ready_rx.recv()).await {
            Ok(ready) => break ready,
            Err(_) => {
                let mut writer = conn.writer.lock().await;
                let greeted = async {
                    writer.write_all(b"{\"type\":\"hello\"}\n").await?;
                    writer.flush().await
                };
                if let Err(e) = greeted.await {
                    return Err(Error::SessionUnavailable {
                        reason: format!("the session agent's stdin closed: {e}"),
                    });
                }
            }
        }
    };
    match ready {
        Some(Ok(next_id)) => {
            // An agent an earlier host used says where its ids end.
            conn.next_id.fetch_max(next_id, Ordering::SeqCst);
            Ok(conn)
        }
        Some(Err(stderr)) => Err(Error::SessionUnavailable {
            reason: format!("the session agent exited: {}", stderr.trim()),
        }),
        None => Err(Error::SessionUnavailable {
            reason: "the session agent exited before it was ready".into(),
        }),
    }
}

/// A new container made as `launched` says, holding the session's programs
/// and secrets and a copy of the checkpoint at `from`, ready to start from it.
pub(super) async fn prepare_restore(
    engine: &Engine,
    launched: &Launched,
    c: &SessionConfig,
    from: &std::path::Path,
    checkpoint: &str,
) -> Result<crate::engine::ContainerGuard> {
    let (file_secrets, env_secrets) = (&launched.file_secrets, &launched.env_secrets);
    let container = engine.create_container(&launched.spec).await?;
    let id = container.id().to_string();
    engine
        .upload_archive(
            &id,
            AGENT_DIR,
            Bytes::from(programs_tar(
                AgentProgram::for_engine(engine).await?,
                &c.helpers,
                env_secrets,
            )?),
        )
        .await?;
    if !file_secrets.is_empty() {
        let tar = secrets_archive(file_secrets, c.hardening.owner_ids())?;
        engine
            .upload_archive(&id, SECRETS_DIR, Bytes::from(tar))
            .await?;
    }
    let to = engine.checkpoint_path(&id, checkpoint).await?;
    let from = from.to_path_buf();
    tokio::task::spawn_blocking(move || copy_checkpoint(&from, &to))
        .await
        .map_err(|e| Error::io("copying a checkpoint", std::io::Error::other(e)))?
        .map_err(|e| Error::Checkpoint {
            operation: "fork",
            reason: format!("copying the checkpoint: {e}"),
            state: "the session is unchanged".into(),
        })?;
    Ok(container)
}

/// The file beside the agent that holds the secrets given as variables
/// (a JSON object of names and values): the agent adds them to every
/// command's environment. They are not in the container's own
/// configuration, which Docker copies into every image committed from it
/// (snapshots, forks, resumes); the agent's directory is a volume, which
/// no commit takes.
const SECRET_ENV_FILE: &str = "secret-env.json";

/// The agent and the helpers as a tar to extract at `/var/inputs`: all
/// root-owned, files 0644 in a 0755 directory, so the session's user can
/// run them and change none of them (nor the secrets' file, which holds
/// what its commands' environment holds anyway).
pub(super) fn programs_tar(
    agent: AgentProgram,
    helpers: &[(&'static str, &'static str)],
    secret_env: &[(String, String)],
) -> Result<Vec<u8>> {
    let (dir, files) = programs(agent, helpers, secret_env, "")?;
    crate::archive::build_tar(&[(&dir, 0o755)], &files)
}

/// The agent's directory (under `prefix`; `""`: relative to the agent's
/// volume) and the agent, the helpers and the secrets' file in it.
fn programs(
    agent: AgentProgram,
    helpers: &[(&'static str, &'static str)],
    secret_env: &[(String, String)],
    prefix: &str,
) -> Result<(String, Vec<crate::archive::TarFile>)> {
    let dir = format!("{prefix}.dockhand");
    let mut files = vec![agent.file(&dir)];
    files.extend(
        helpers
            .iter()
            .map(|(name, text)| crate::archive::TarFile::new(format!("{dir}/{name}"), *text)),
    );
    if !secret_env.is_empty() {
        let values: serde_json::Map<String, serde_json::Value> = secret_env
            .iter()
            .map(|(name, value)| (name.clone(), serde_json::Value::String(value.clone())))
            .collect();
        let text = serde_json::to_vec(&values)
            .map_err(|e| Error::io("writing the secrets' file", std::io::Error::other(e)))?;
        files.push(crate::archive::TarFile::new(
            format!("{dir}/{SECRET_ENV_FILE}"),
            text,
        ));
    }
    Ok((dir, files))
}

/// What a new container needs before it starts, as one tar to extract at
/// `/`: the workspace (see [`workspace_tar`]) and the agent with its
/// helpers in the agent's directory (a volume, reached through `/`).
pub(super) fn start_tar(
    agent: AgentProgram,
    helpers: &[(&'static str, &'static str)],
    secret_env: &[(String, String)],
    workspace: &str,
    owner: (u64, u64),
) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    append_workspace(&mut builder, workspace, owner)?;
    let prefix = format!("{}/", AGENT_DIR.trim_matches('/'));
    let (dir, files) = programs(agent, helpers, secret_env, &prefix)?;
    crate::archive::append_files(&mut builder, &[(&dir, 0o755)], &files)?;
    builder
        .into_inner()
        .map_err(|e| Error::io("building the start archive", e))
}

/// The workspace directory alone, as [`append_workspace`] adds it.
#[cfg(test)]
fn workspace_tar(workspace: &str, owner: (u64, u64)) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    append_workspace(&mut builder, workspace, owner)?;
    builder
        .into_inner()
        .map_err(|e| Error::io("building the workspace archive", e))
}

/// Adds the workspace directory and its parents to a tar to extract at
/// `/`: parents root-owned, the workspace itself owned by the session's
/// user.
fn append_workspace<W: std::io::Write>(
    builder: &mut tar::Builder<W>,
    workspace: &str,
    (uid, gid): (u64, u64),
) -> Result<()> {
    let parts: Vec<&str> = workspace
        .trim_matches('/')
        .split('/')
        .filter(|p| !p.is_empty())
        .collect();
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
    Ok(())
}

/// The directory `path` alone, owned by the session's user, as a tar to
/// extract in its parent (returned with it): the parents keep their owners.
pub(super) fn owned_dir_tar(path: &str, (uid, gid): (u64, u64)) -> Result<(String, Vec<u8>)> {
    let trimmed = path.trim_end_matches('/');
    let (parent, leaf) = trimmed.rsplit_once('/').unwrap_or(("", trimmed));
    let parent = if parent.is_empty() { "/" } else { parent };
    let wrap = |e| Error::io("building a volume's archive", e);
    let mut builder = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_size(0);
    h.set_mode(0o755);
    h.set_mtime(0);
    h.set_uid(uid);
    h.set_gid(gid);
    h.set_path(format!("{leaf}/")).map_err(wrap)?;
    h.set_cksum();
    builder.append(&h, std::io::empty()).map_err(wrap)?;
    Ok((parent.to_string(), builder.into_inner().map_err(wrap)?))
}

/// Routes the agent's replies to the requests waiting for them, until the
/// agent's output ends or its container stops.
async fn read_replies(
    mut output: Pin<Box<dyn Stream<Item = Result<LogChunk>> + Send>>,
    exited: impl std::future::Future<Output = ()> + Send,
    routes: Routes,
    ready: mpsc::UnboundedSender<std::result::Result<u64, String>>,
    parking: Arc<std::sync::atomic::AtomicBool>,
) {
    let mut lines = LineBuffer::default();
    let mut stderr = String::new();
    let mut exited = std::pin::pin!(exited);
    loop {
        let chunk = tokio::select! {
            chunk = output.next() => chunk,
            () = &mut exited => None,
        };
        let Some(chunk) = chunk else { break };
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
                let next_id = match reply {
                    Reply::Ready { next_id, .. } => next_id,
                    _ => 0,
                };
                let _ = ready.send(Ok(next_id));
                continue;
            };
            let mut routes = lock(&routes);
            let Some(routes) = routes.as_mut() else { break };
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
    if parking.load(Ordering::SeqCst) {
        // Paused with its memory: the requests live on, to be answered
        // after the resume.
        return;
    }
    // Dropping the senders tells every waiting request that the agent is gone.
    lock(&routes).take();
}

#[cfg(test)]
mod tests {
    use super::workspace_tar;
    use std::io::{BufRead, Write};

    /// The real agent (the SDK's static one), run on the host with its
    /// pids watch off and no request but `hello`: it says `ready` at start
    /// and again when asked (a pod's host attaches after the first one went
    /// by), and ends when its stdin closes.
    #[test]
    fn the_agent_says_ready_again_when_greeted_and_ends_with_its_stdin() {
        use std::os::unix::fs::PermissionsExt;
        let Some(binary) = crate::image::prebuilt::AGENT.map(|a| a.unpack().unwrap()) else {
            // Built without the embedded programs (`DOCKHAND_PREBUILD=0`).
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let program = dir.path().join("session-agent");
        std::fs::write(&program, binary).unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut agent = std::process::Command::new(&program)
            .env("DOCKHAND_PIDS_LIMIT", "0")
            .env("DOCKHAND_WORKSPACE", dir.path())
            .env("DOCKHAND_ROOTS", dir.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the agent runs");
        let mut stdin = agent.stdin.take().unwrap();
        let mut lines = std::io::BufReader::new(agent.stdout.take().unwrap()).lines();
        let first: serde_json::Value =
            serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert_eq!(first["type"], "ready");
        stdin.write_all(b"{\"type\":\"hello\"}\n").unwrap();
        stdin.flush().unwrap();
        let again: serde_json::Value =
            serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert_eq!(again["type"], "ready");
        assert_eq!(again["pid"], first["pid"]);
        assert_eq!(again["next_id"], 1);
        // A later host numbers its requests past every id an earlier one
        // used (a signal for an id with no command is answered by nothing).
        stdin
            .write_all(b"{\"type\":\"signal\",\"id\":41,\"signal\":15}\n{\"type\":\"hello\"}\n")
            .unwrap();
        stdin.flush().unwrap();
        let later: serde_json::Value =
            serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert_eq!(later["next_id"], 42);
        drop(stdin);
        assert!(lines.next().is_none(), "nothing more once stdin closed");
        let status = agent.wait().unwrap();
        assert!(status.success(), "{status:?}");
    }

    /// Each entry of a tar with its owner's uid.
    fn owners(tar: &[u8]) -> Vec<(String, u64)> {
        tar::Archive::new(tar)
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let path = e.path().unwrap().to_string_lossy().into_owned();
                (path, e.header().uid().unwrap())
            })
            .collect()
    }

    #[test]
    fn the_start_archive_holds_the_workspace_and_the_agent_in_its_directory() {
        let helpers = [("helper.py", "print(1)")];
        let tar = super::start_tar(
            super::AgentProgram::fake(b"\x7fELF"),
            &helpers,
            &[],
            "/home/user",
            (1000, 1000),
        )
        .unwrap();
        assert_eq!(
            owners(&tar),
            [
                ("home/".to_string(), 0),
                ("home/user/".to_string(), 1000),
                ("var/inputs/.dockhand/".to_string(), 0),
                ("var/inputs/.dockhand/session-agent".to_string(), 0),
                ("var/inputs/.dockhand/helper.py".to_string(), 0),
            ]
        );
    }

    #[test]
    fn workspace_archive_owns_only_the_leaf() {
        let tar = workspace_tar("/home/agent/work", (65534, 65534)).unwrap();
        let entries = owners(&tar);
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
