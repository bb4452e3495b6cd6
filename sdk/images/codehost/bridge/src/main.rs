//! dockhand code-host bridge: runs model-written Python in Monty for the host.
//!
//! Runs as the main process of the long-lived code-host container and speaks
//! JSON lines on stdin/stdout with the host (see
//! `sdk/src/codemode/protocol.rs`):
//!
//! ```text
//! host -> bridge  {"type": "execute", "id", "code", "inputs", "tools", "session", "type_stubs",
//!                  "modules", "module_stubs", "skill_stubs"}
//!                 {"type": "tool_result", "call", "ok", "value" | "error"}
//!                 {"type": "cancel", "id"}
//!                 {"type": "close_session", "session"}
//!                 {"type": "open_mounts"}   (once, after the copies are uploaded)
//!                 {"type": "resume", "id", "code", "tools", "approval", "suspended", "reply"}
//!                 {"type": "hello"}         (answered with another "ready")
//! bridge -> host  {"type": "ready", "pid"}
//!                 {"type": "tool_call", "call", "execution", "name", "args", "kwargs"}
//!                 {"type": "result", "id", "ok", "value" | "error" | "suspended", "stdout", "stdout_truncated"}
//!                 {"type": "session_closed", "session"}
//!                 {"type": "mounts_opened", "error"}
//! ```
//!
//! The code runs in Monty's worker processes (the `monty` binary of the
//! pinned `pydantic-monty-runtime`), driven through monty-pool: Monty is the
//! sandbox, the container around it the second wall, and a worker that
//! crashes takes only itself down. Every execution gets a fresh Monty session
//! (a few are checked out and given the prelude ahead of time, so an
//! execution costs one feed); a REPL session keeps one Monty session per id.
//! Limits (time, memory, recursion) are Monty's; the bridge adds a
//! wall-clock limit that includes time spent in tools, and the product rules
//! of `rules.rs`.
//!
//! Tool calls are Monty external function calls: a call that the code
//! awaits, or that sits inside gather(...), is answered with a future and
//! runs concurrently on the host; a plain `x = tool(a)` waits for its value.
//! Calls the code issues in a row go to the host together, so the host
//! wakes once for many; none waits longer than a millisecond or so while the
//! code keeps running, and all go at once when the code waits. A gather over
//! a comprehension of calls of one tool (`gather(*[t(x) for x in xs])`) is
//! one suspension for all its calls rather than one each (see `fanout`).
//!
//! When the host offers a Unix socket (its settings name `socket` and a
//! `token`; local daemons only), the bridge connects to it, says `hello` with
//! the token, and speaks the protocol there instead: a round trip then skips
//! the daemon's attach relay. If it cannot connect it stays on stdin/stdout.
//! Either way it exits when stdin closes, as it does when its owner dies.
//!
//! A call of a tool the host named in `approval` stops the execution: its
//! state comes back in the result's `suspended` and a `resume` request may
//! go on from it, in this bridge or another (see `suspend`).

mod calls;
mod checks;
mod config;
mod execution;
mod failures;
mod fanout;
mod guards;
mod modules;
mod oscalls;
mod outbox;
mod prelude;
mod printed;
mod rules;
mod saving;
mod skills;
mod suspend;
mod tagged;
mod values;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use monty_pool::{on_print_sync, Checkout, Pool, PoolConfig, ReplConfig, TurnEvent};
use monty_types::{TypeCheckingConfig, TypeCheckingFormat};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, Notify};

pub use crate::config::Config;
use crate::execution::{Execution, Outcome};
use crate::failures::Failed;

/// Interpreters checked out ahead, so an execution waits for none.
const SPARES: usize = 2;

/// Where a tool call's reply goes: the execution's inbox.
pub type Inbox = mpsc::UnboundedSender<(u64, Value)>;

/// A REPL session's Monty session; `None` once a failure ended it.
type SessionSlot = Arc<tokio::sync::Mutex<Option<Checkout>>>;

/// Everything the bridge's tasks share.
pub struct Bridge {
    pub config: Config,
    pool: Pool,
    out: outbox::Outbox,
    calls: AtomicU64,
    /// Host call number -> (execution id, the execution's inbox).
    owners: Mutex<HashMap<u64, (String, Inbox)>>,
    /// Execution id -> its cancel signal.
    running: Mutex<HashMap<String, Arc<Notify>>>,
    sessions: Mutex<HashMap<String, SessionSlot>>,
    spares: tokio::sync::Mutex<mpsc::Receiver<Checkout>>,
    /// The host's directories, opened once when the host says their copies
    /// are in place (see `oscalls`); none until then.
    pub mounts: std::sync::OnceLock<Vec<monty_pool::MountSpec>>,
    /// The settings, for the mounts.
    settings: Value,
}

impl Bridge {
    pub fn send(&self, message: &Value) {
        let mut line = serde_json::to_vec(message).unwrap_or_default();
        line.push(b'\n');
        self.out.send(line);
    }

    fn repl_config(&self, type_stubs: Option<String>) -> ReplConfig {
        ReplConfig {
            limits: Some(self.config.limits()),
            type_check: type_stubs.is_some(),
            type_check_stubs: type_stubs,
            type_check_config: TypeCheckingConfig {
                format: TypeCheckingFormat::Concise,
                color: false,
            },
            os_policy: self.config.os_policy(),
            ..ReplConfig::default()
        }
    }

    /// A checked-out Monty session with the prelude fed.
    pub async fn fresh(&self, type_stubs: Option<String>) -> Result<Checkout, Failed> {
        let mut checkout = self
            .pool
            .checkout(&self.repl_config(type_stubs))
            .await
            .map_err(|e| Failed::new("crash", format!("no interpreter could be started: {e}")))?;
        let guards = self.config.policy.loop_guard;
        let prelude = prelude::text(self.config.loop_limit, guards);
        let mut ignore = on_print_sync(|_, _| {});
        match checkout
            .feed(prelude, Vec::new(), Vec::new(), true, &mut ignore)
            .await
        {
            Ok(TurnEvent::Complete(_)) => Ok(checkout),
            Ok(other) => Err(Failed::new(
                "crash",
                format!("the prelude stopped at {other:?}"),
            )),
            Err(e) => Err(Failed::new("crash", format!("the prelude failed: {e}"))),
        }
    }

    async fn take_fresh(&self) -> Result<Checkout, Failed> {
        let mut spares = self.spares.lock().await;
        match tokio::time::timeout(Duration::from_secs(10), spares.recv()).await {
            Ok(Some(checkout)) => Ok(checkout),
            _ => {
                drop(spares);
                self.fresh(None).await
            }
        }
    }

    /// Registers a tool call and returns its number and the line that asks
    /// the host for it; the caller sends the line (see [`Bridge::send_lines`]).
    /// Its reply goes to `inbox`.
    /// A number for a call the host or the bridge answers: tool calls and
    /// sleeps share one sequence, so their replies share one inbox.
    pub fn next_call_number(&self) -> u64 {
        self.calls.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn tool_call(
        &self,
        execution: &str,
        inbox: &Inbox,
        name: &str,
        args: Vec<Value>,
        kwargs: serde_json::Map<String, Value>,
    ) -> (u64, Vec<u8>) {
        let number = self.next_call_number();
        lock(&self.owners).insert(number, (execution.to_string(), inbox.clone()));
        // The execution's id lets the host tell a skill's calls from its caller's.
        let message = json!({"type": "tool_call", "call": number, "execution": execution, "name": name, "args": args, "kwargs": kwargs});
        let mut line = serde_json::to_vec(&message).unwrap_or_default();
        line.push(b'\n');
        (number, line)
    }

    /// Sends complete protocol lines as they are.
    pub fn send_lines(&self, lines: Vec<u8>) {
        self.out.send(lines);
    }

    fn deliver(&self, message: Value) {
        let Some(call) = message.get("call").and_then(Value::as_u64) else {
            return;
        };
        if let Some((_, inbox)) = lock(&self.owners).remove(&call) {
            let _ = inbox.send((call, message));
        }
    }

    async fn session(&self, id: &str, type_stubs: Option<String>) -> Result<SessionSlot, Failed> {
        {
            let sessions = lock(&self.sessions);
            if let Some(slot) = sessions.get(id) {
                return Ok(slot.clone());
            }
            if sessions.len() >= self.config.max_sessions {
                return Err(Failed::new(
                    "session_limit",
                    format!(
                        "{} sessions are open on this host; close one first",
                        self.config.max_sessions
                    ),
                ));
            }
        }
        let slot = Arc::new(tokio::sync::Mutex::new(Some(self.fresh(type_stubs).await?)));
        lock(&self.sessions).insert(id.to_string(), slot.clone());
        Ok(slot)
    }

    fn close_session(&self, id: &str) {
        // Dropping the checkout ends its worker's session.
        let slot = lock(&self.sessions).remove(id);
        drop(slot);
    }

    async fn execute(self: Arc<Self>, request: Value) {
        let id = request["id"].as_str().unwrap_or_default().to_string();
        let session_id = request["session"].as_str().map(String::from);
        let type_stubs = request["type_stubs"].as_str().map(String::from);
        let cancel = Arc::new(Notify::new());
        lock(&self.running).insert(id.clone(), cancel.clone());
        let mut execution = Execution::new(self.clone(), &request);
        let outcome = tokio::select! {
            outcome = self.run_on_a_session(&mut execution, &request, session_id.as_deref(), type_stubs) => outcome,
            () = cancel.notified() => Err(Outcome::Cancelled),
            () = tokio::time::sleep(self.config.timeout) => Err(Outcome::Failed(Failed::new(
                "timeout",
                format!("the execution ran longer than {}", self.config.timeout_text()),
            ))),
        };
        let error = match &outcome {
            Ok(_) => None,
            Err(Outcome::Cancelled) => Some(Failed::new("cancelled", "cancelled by the host")),
            Err(Outcome::Failed(f)) => Some(f.clone()),
            Err(Outcome::Suspended(_)) => None,
        };
        if let (Some(error), Some(session)) = (&error, &session_id) {
            // Monty keeps no promise about a heap a limit stopped mid-operation.
            const SESSION_ENDING: [&str; 6] = [
                "timeout",
                "memory",
                "crash",
                "cancelled",
                "loop_limit",
                "tool_limit",
            ];
            if SESSION_ENDING.contains(&error.kind) {
                self.close_session(session);
            }
        }
        lock(&self.owners).retain(|_, (owner, _)| *owner != id);
        lock(&self.running).remove(&id);
        let (stdout, cut) = execution.printed();
        let mut result =
            json!({"type": "result", "id": id, "stdout": stdout, "stdout_truncated": cut});
        match (outcome, error) {
            (Ok(value), _) => {
                result["ok"] = json!(true);
                result["value"] = value;
            }
            (Err(Outcome::Suspended(saved)), _) => {
                result["ok"] = json!(true);
                result["suspended"] = saved;
            }
            (Err(_), Some(error)) => {
                result["ok"] = json!(false);
                result["error"] = error.to_json();
            }
            (Err(_), None) => {}
        }
        self.send(&result);
    }

    async fn run_on_a_session(
        &self,
        execution: &mut Execution,
        request: &Value,
        session_id: Option<&str>,
        type_stubs: Option<String>,
    ) -> Result<Value, Outcome> {
        let Some(session_id) = session_id else {
            let resuming = request["type"] == "resume";
            let mut checkout = match type_stubs {
                // A saved state is loaded into a worker that was never fed.
                _ if resuming => {
                    self.pool
                        .checkout(&self.repl_config(None))
                        .await
                        .map_err(|e| {
                            Failed::new("crash", format!("no interpreter could be started: {e}"))
                        })?
                }
                Some(stubs) => self.fresh(Some(stubs)).await?,
                None => self.take_fresh().await?,
            };
            let outcome = if resuming {
                execution
                    .resume(&mut checkout, &request["suspended"], &request["reply"])
                    .await
            } else {
                execution.run(&mut checkout).await
            };
            // A worker whose run failed may hold anything: end it. A clean
            // one goes back to the pool for a new session.
            if outcome.is_ok() {
                tokio::spawn(async move {
                    let _ = checkout.finish().await;
                });
            }
            return outcome;
        };
        let slot = self.session(session_id, type_stubs).await?;
        let mut guard = slot.lock().await;
        let Some(checkout) = guard.as_mut() else {
            return Err(Outcome::Failed(Failed::new(
                "crash",
                "this session ended with an earlier failure; start a new one",
            )));
        };
        execution.run(checkout).await
    }
}

/// A poisoned lock only means another task panicked while holding it; the
/// maps it guards stay consistent, so carry on.
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The `monty` worker binary: beside this program, where dockhand's images
/// put the one this bridge was built against, or else on PATH, where pip
/// puts it.
fn monty_binary() -> Option<std::path::PathBuf> {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join("monty")));
    if let Some(beside) = beside.filter(|p| p.is_file()) {
        return Some(beside);
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin".into());
    std::env::split_paths(&path)
        .map(|dir| dir.join("monty"))
        .find(|p| p.is_file())
}

async fn keep_spares(bridge: Arc<Bridge>, ready: mpsc::Sender<Checkout>) {
    loop {
        match bridge.fresh(None).await {
            Ok(checkout) => {
                if ready.send(checkout).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                eprintln!("could not prepare an interpreter: {}", e.message);
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

async fn serve(bridge: Arc<Bridge>, input: impl AsyncRead + Unpin) {
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let Ok(message) = serde_json::from_slice::<Value>(&line) else {
            continue;
        };
        match message["type"].as_str() {
            Some("execute" | "resume") => {
                tokio::spawn(bridge.clone().execute(message));
            }
            Some("tool_result") => bridge.deliver(message),
            Some("cancel") => {
                let id = message["id"].as_str().unwrap_or_default();
                if let Some(cancel) = lock(&bridge.running).get(id) {
                    cancel.notify_one();
                }
            }
            Some("open_mounts") => {
                let opened = oscalls::mounts(&bridge.settings)
                    .and_then(|m| bridge.mounts.set(m).map_err(|_| "already open".into()));
                let error = opened.err();
                bridge.send(&json!({"type": "mounts_opened", "error": error}));
            }
            // A host that attached after the bridge started (a pod on a
            // cluster) missed the first `ready`: say it again.
            Some("hello") => bridge.send(&json!({"type": "ready", "pid": std::process::id()})),
            Some("close_session") => {
                let session = message["session"].as_str().unwrap_or_default();
                bridge.close_session(session);
                bridge.send(&json!({"type": "session_closed", "session": session}));
            }
            _ => {}
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let config = std::env::args()
        .nth(1)
        .and_then(|a| serde_json::from_str::<Value>(&a).ok())
        .unwrap_or(Value::Null);
    let settings = config;
    let config = Config::from_json(&settings);
    let Some(binary) = monty_binary() else {
        eprintln!("the `monty` worker binary is not on PATH: install pydantic-monty-runtime");
        std::process::exit(1);
    };
    let mut pool_config = PoolConfig::subprocess(binary);
    pool_config.min_processes = SPARES + 1;
    pool_config.max_processes = config.max_sessions + SPARES + 1;
    pool_config.checkout_timeout = Some(Duration::from_secs(10));
    pool_config.feed_duration_limit_grace = Some(Duration::from_secs(1));
    let pool = match Pool::new(pool_config).await {
        Ok(pool) => pool,
        Err(e) => {
            eprintln!("Monty's workers could not start: {e}");
            std::process::exit(1);
        }
    };
    let socket = match (&config.socket, &config.token) {
        (Some(path), Some(token)) => connect(path, token).await,
        _ => None,
    };
    let (input, out): (Box<dyn AsyncRead + Unpin + Send>, _) = match socket {
        Some(stream) => {
            let (read, write) = stream.into_split();
            tokio::spawn(exit_when_stdin_closes());
            (Box::new(read), outbox::Outbox::socket(write))
        }
        None => (Box::new(tokio::io::stdin()), outbox::Outbox::stdout()),
    };
    let (ready, spares) = mpsc::channel(SPARES);
    let bridge = Arc::new(Bridge {
        config,
        pool,
        out,
        calls: AtomicU64::new(0),
        owners: Mutex::new(HashMap::new()),
        running: Mutex::new(HashMap::new()),
        sessions: Mutex::new(HashMap::new()),
        spares: tokio::sync::Mutex::new(spares),
        mounts: std::sync::OnceLock::new(),
        settings,
    });
    match bridge.fresh(None).await {
        Ok(first) => {
            let _ = ready.send(first).await;
        }
        Err(e) => {
            eprintln!("could not prepare an interpreter: {}", e.message);
            std::process::exit(1);
        }
    }
    tokio::spawn(keep_spares(bridge.clone(), ready));
    bridge.send(&json!({"type": "ready", "pid": std::process::id()}));
    serve(bridge, input).await;
    // The host closed its end: leave without waiting for anything.
    std::process::exit(0);
}

/// The host's socket, greeted with the token; `None` if it cannot be reached
/// (a runtime that does not pass host sockets through, say).
async fn connect(path: &str, token: &str) -> Option<tokio::net::UnixStream> {
    let connecting = tokio::net::UnixStream::connect(path);
    let mut stream = match tokio::time::timeout(Duration::from_secs(2), connecting).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            eprintln!("the host's socket is not reachable ({e}); using stdin/stdout");
            return None;
        }
        Err(_) => return None,
    };
    let mut hello = serde_json::to_vec(&json!({"type": "hello", "token": token})).ok()?;
    hello.push(b'\n');
    stream.write_all(&hello).await.ok()?;
    Some(stream)
}

async fn exit_when_stdin_closes() {
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 256];
    while matches!(stdin.read(&mut buf).await, Ok(n) if n > 0) {}
    std::process::exit(0);
}
