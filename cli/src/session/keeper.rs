//! The process that holds a CLI session: started detached by `dockhand
//! session start`, it owns the session (so the container lives exactly as
//! long as it does) and serves the other `dockhand session` commands over a
//! Unix socket only its user can open.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use base64::Engine as _;
use dockhand::kernel::{Kernel, KernelConfig, RunOptions};
use dockhand::session::{Edit, ExecOptions, PauseMode, Session, SessionApi, SessionConfig};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// Where session sockets live: `$XDG_RUNTIME_DIR/dockhand/sessions`, else
/// `/tmp/dockhand-<uid>/sessions`; private to the user.
pub fn socket_dir() -> PathBuf {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(|d| PathBuf::from(d).join("dockhand"))
        .unwrap_or_else(|| {
            // /proc/self belongs to the process's own uid.
            let uid = std::fs::metadata("/proc/self").map(|m| {
                use std::os::unix::fs::MetadataExt;
                m.uid()
            });
            PathBuf::from(format!("/tmp/dockhand-{}", uid.unwrap_or(0)))
        });
    base.join("sessions")
}

pub fn socket_path(id: &str) -> PathBuf {
    socket_dir().join(format!("{id}.sock"))
}

fn private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    Ok(())
}

/// Starts the session, then serves requests until `close`, a signal, or
/// `idle` without a request.
pub async fn serve(
    id: String,
    config: SessionConfig,
    kernel: Option<KernelConfig>,
    idle: Duration,
    host: Option<String>,
) -> Result<()> {
    let client = crate::connect(host, true).await?;
    // A kernel's container is a session's: every session request works on
    // it too, and `run_code` runs cells.
    let (session, kernel) = match kernel {
        Some(config) => {
            let kernel = client.kernel(config);
            kernel.start().await?;
            (kernel.session().clone(), Some(kernel))
        }
        None => {
            let session = client.session(config);
            session.start().await?;
            (session, None)
        }
    };
    let forks = Forks::default();
    serve_one(id, session, kernel, idle, forks.clone()).await?;
    // Forks live as long as their parent's session.
    let left: Vec<(String, Session)> = forks
        .lock()
        .map(|mut f| f.drain(..).collect())
        .unwrap_or_default();
    for (fork_id, fork) in left {
        let _ = std::fs::remove_file(socket_path(&fork_id));
        if fork.state() != dockhand::State::Closed {
            let _ = fork.close().await;
        }
    }
    Ok(())
}

/// The forks a keeper serves beside its session, by id.
type Forks = std::sync::Arc<std::sync::Mutex<Vec<(String, Session)>>>;

/// What a request may reach besides its session.
struct Reach<'a> {
    kernel: Option<&'a Kernel>,
    forks: &'a Forks,
    idle: Duration,
    /// Terminals attached now: a session someone types in is not idle.
    attached: &'a std::sync::Arc<()>,
    /// Ports exposed on the host, by port inside; they listen as long as
    /// the keeper does.
    exposed: &'a std::sync::Mutex<Vec<dockhand::session::ExposedPort>>,
}

/// Serves one session's socket until `close`, a signal, or `idle`
/// without a request; then closes the session.
fn serve_one(
    id: String,
    session: Session,
    kernel: Option<Kernel>,
    idle: Duration,
    forks: Forks,
) -> futures::future::BoxFuture<'static, Result<()>> {
    Box::pin(async move {
        let path = socket_path(&id);
        private_dir(path.parent().unwrap_or(Path::new("/tmp")))?;
        let _ = std::fs::remove_file(&path);
        let listener =
            UnixListener::bind(&path).with_context(|| format!("binding {}", path.display()))?;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        let attached = std::sync::Arc::new(());
        let exposed = std::sync::Mutex::new(Vec::new());
        let reach = Reach {
            kernel: kernel.as_ref(),
            forks: &forks,
            idle,
            attached: &attached,
            exposed: &exposed,
        };
        loop {
            tokio::select! {
                // A forgotten session does not run forever.
                _ = tokio::time::sleep(idle) => {
                    if std::sync::Arc::strong_count(&attached) == 1 {
                        break;
                    }
                }
                accepted = listener.accept() => {
                    let Ok((stream, _)) = accepted else { continue };
                    if handle(stream, &session, &reach).await {
                        break;
                    }
                }
                _ = term.recv() => break,
            }
        }
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(path.with_extension("log"));
        if session.state() != dockhand::State::Closed {
            session.close().await?;
        }
        Ok(())
    })
}

/// One request per connection; `true` when it closed the session.
async fn handle(stream: UnixStream, session: &Session, reach: &Reach<'_>) -> bool {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let mut reader = BufReader::new(read);
    if reader.read_line(&mut line).await.is_err() {
        return false;
    }
    let request: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
    let op = request["op"].as_str().unwrap_or("").to_string();
    if op == "attach" {
        // A terminal lives beside the other requests, as long as its shell.
        let attached = reach.attached.clone();
        let session = session.clone();
        tokio::spawn(async move {
            super::attach::serve_terminal(session, request, reader, write).await;
            drop(attached);
        });
        return false;
    }
    let reply = match answer(&op, &request, session, reach).await {
        Ok(v) => v,
        // The exit code the error means, so the command that asked exits
        // as it would have run the request itself (124 for a time limit).
        Err(e) => json!({"error": format!("{e:#}"), "exit_code": crate::outcome::code_of(&e)}),
    };
    let _ = write.write_all(format!("{reply}\n").as_bytes()).await;
    op == "close" && reply.get("error").is_none()
}

async fn answer(op: &str, r: &Value, session: &Session, reach: &Reach<'_>) -> Result<Value> {
    let text = |key: &str| r[key].as_str().unwrap_or("").to_string();
    let kernel = reach.kernel;
    let mode = || -> Result<PauseMode> { text("mode").parse().map_err(anyhow::Error::msg) };
    Ok(match op {
        "pause" => {
            let paused = match kernel {
                Some(kernel) => kernel.pause(mode()?).await?,
                None => session.pause(mode()?).await?,
            };
            json!({"mode": paused.mode.to_string(), "container_id": paused.id, "checkpoint_bytes": paused.checkpoint_bytes})
        }
        "resume" => {
            match kernel {
                Some(kernel) => kernel.resume().await?,
                None => session.resume().await?,
            }
            json!({"resumed": true})
        }
        "fork" => {
            if kernel.is_some() {
                anyhow::bail!("a kernel is not forked from the CLI; fork a session");
            }
            let count = r["count"].as_u64().unwrap_or(1) as usize;
            let made = session.fork(count, mode()?).await?;
            let mut ids = Vec::new();
            for fork in made {
                let fork_id = format!("s{}", &uuid::Uuid::new_v4().simple().to_string()[..11]);
                if let Ok(mut forks) = reach.forks.lock() {
                    forks.push((fork_id.clone(), fork.clone()));
                }
                tokio::spawn(serve_one(
                    fork_id.clone(),
                    fork,
                    None,
                    reach.idle,
                    reach.forks.clone(),
                ));
                ids.push(fork_id);
            }
            // Each fork's socket answers before its id is printed.
            for fork_id in &ids {
                let path = socket_path(fork_id);
                for _ in 0..100 {
                    if path.exists() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            json!({"forks": ids})
        }
        "ping" => json!({"ok": true}),
        "expose" => {
            let port = r["port"]
                .as_u64()
                .and_then(|p| u16::try_from(p).ok())
                .context("a port from 1 to 65535")?;
            let lock = || reach.exposed.lock().unwrap_or_else(|p| p.into_inner());
            let already = lock()
                .iter()
                .find(|e| e.port() == port)
                .map(|e| e.local_addr());
            let address = match already {
                Some(address) => address,
                None => {
                    let made = session.expose(port).await?;
                    let address = made.local_addr();
                    lock().push(made);
                    address
                }
            };
            json!({"port": port, "address": address.to_string(), "url": format!("http://{address}")})
        }
        "describe" => serde_json::to_value(session.describe())?,
        "exec" => {
            let mut options = ExecOptions::new();
            if let Some(t) = r["timeout"].as_f64() {
                options = options.timeout(Duration::from_secs_f64(t.clamp(0.001, 86_400.0)));
            }
            if let Some(cwd) = r["cwd"].as_str() {
                options = options.cwd(cwd);
            }
            let out = session.exec_with(&text("command"), options).await?;
            json!({"exit_code": out.exit_code, "stdout": out.stdout, "stderr": out.stderr})
        }
        "read" => {
            let data = session.read_file(&text("path")).await?;
            // Bytes as they are, base64-encoded, for a caller that asks
            // (binary files: parquet, images); text otherwise.
            if r["binary"].as_bool() == Some(true) {
                json!({"content_base64": base64::engine::general_purpose::STANDARD.encode(&data)})
            } else {
                json!({"content": String::from_utf8_lossy(&data)})
            }
        }
        "write" => {
            let data = match r.get("content_base64").and_then(Value::as_str) {
                Some(encoded) => base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .context("content_base64 is not base64")?,
                None => text("content").into_bytes(),
            };
            session.write_file(&text("path"), &data).await?;
            json!({"written_bytes": data.len()})
        }
        "edit" => {
            let edits: Vec<Edit> =
                serde_json::from_value(r["edits"].clone()).context("edits are not valid")?;
            let result = session.edit_file(&text("path"), &edits).await?;
            json!({"applied": result.applied, "changes": result.changes.iter().map(|c| json!({"line": c.line, "removed": c.removed_lines, "added": c.added_lines})).collect::<Vec<_>>()})
        }
        "snapshot" => {
            let snapshot = session.snapshot().await?;
            json!({"image": snapshot.image, "id": snapshot.id})
        }
        "close" => {
            let snapshot = session.close().await?;
            json!({"closed": true, "snapshot": snapshot.map(|s| s.image)})
        }
        "run_code" | "notebook" => {
            let kernel = kernel.context("this is a session, not a kernel")?;
            let context = r["context"]
                .as_str()
                .unwrap_or(dockhand::kernel::DEFAULT_CONTEXT);
            if !kernel.contexts().iter().any(|c| c == context) {
                let language = r["language"]
                    .as_str()
                    .unwrap_or("python")
                    .parse::<dockhand::kernel::Language>()?;
                let options = dockhand::kernel::ContextOptions::new().language(language);
                kernel.create_context_with(context, options).await?;
            }
            if op == "notebook" {
                json!({"notebook": kernel.notebook(context).await?})
            } else {
                let mut options = RunOptions::new().context(context);
                if let Some(t) = r["timeout"].as_f64() {
                    options = options.timeout(Duration::from_secs_f64(t.clamp(0.001, 86_400.0)));
                }
                let execution = kernel.run_with(&text("code"), options).await?;
                json!({"execution": execution})
            }
        }
        other => anyhow::bail!("unknown request `{other}`"),
    })
}
