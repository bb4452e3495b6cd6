//! dockhand's session agent: the main process of a session's container.
//!
//! Speaks JSON lines on stdin/stdout with the host (the SDK's
//! `session::protocol`). Requests carry an `id`; every reply echoes it.
//! Requests run on threads of their own, so a long command does not hold up
//! a file read; `input`, `signal`, `resize`, `ack`, `hangup` and `hello` are
//! answered on the reading loop, in the order they came.
//!
//! A static program: it needs no interpreter and no C library in the
//! image, and loads nothing the session's code can write.

mod commands;
mod files;
mod paths;
mod pids;
mod ports;
mod reply;
mod sys;
#[cfg(test)]
mod testing;
mod watch;

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use serde_json::{json, Value};

use crate::commands::{spawn_thread, Input};
use crate::reply::{send, Refused};

/// What the agent's threads share.
pub struct Agent {
    pub workspace: String,
    /// Secrets given as variables, added to every command's environment:
    /// read from the file the host puts beside this program (root's, on
    /// the agent's own volume), so they are in no image committed from
    /// the container.
    pub secret_env: Vec<(String, String)>,
    pub roots: Vec<String>,
    /// The container's pids limit (threads count too), as the host set it.
    pub pids_limit: u64,
    /// Pids of the commands running now (their own waits reap them).
    pub commands: Mutex<HashSet<u32>>,
    /// Exec id -> process group of a command still running.
    groups: Mutex<HashMap<u64, u32>>,
    /// Exec id -> the queue of a command that keeps its stdin open.
    inputs: Mutex<HashMap<u64, mpsc::Sender<Input>>>,
    /// Exec id -> command, of the commands a host talks to over their stdin
    /// (channels: a kernel relay, say). A host that attaches later finds
    /// them here, as the agent started them: nothing a command wrote says so.
    channels: Mutex<HashMap<u64, String>>,
    /// Exec id -> the master side of a command's terminal.
    terminals: Mutex<HashMap<u64, Arc<std::fs::File>>>,
    /// Exec id -> a connection to a port in the container.
    ports: Mutex<HashMap<u64, Arc<ports::Connection>>>,
    /// Watch id -> the flag that ends the watch.
    watches: Mutex<HashMap<u64, Arc<std::sync::atomic::AtomicBool>>>,
    /// Commands (by process group) ended for using up the pids.
    exhausted: Mutex<HashSet<u32>>,
    /// One past the highest request id seen: a host attaching later (a
    /// server restarted twice) numbers its requests from here, never reusing
    /// the id of a command an earlier host left running.
    next_id: AtomicU64,
}

pub fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Agent {
    fn from_env() -> Agent {
        let workspace = std::env::var("DOCKHAND_WORKSPACE").unwrap_or_else(|_| "/workspace".into());
        let roots: Vec<String> = std::env::var("DOCKHAND_ROOTS")
            .unwrap_or_else(|_| workspace.clone())
            .split(':')
            .filter(|r| !r.is_empty())
            .map(String::from)
            .collect();
        Agent {
            workspace,
            secret_env: secret_env(),
            roots,
            pids_limit: std::env::var("DOCKHAND_PIDS_LIMIT")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            commands: Mutex::default(),
            groups: Mutex::default(),
            inputs: Mutex::default(),
            channels: Mutex::default(),
            terminals: Mutex::default(),
            ports: Mutex::default(),
            watches: Mutex::default(),
            exhausted: Mutex::default(),
            next_id: AtomicU64::new(1),
        }
    }

    pub fn running(&self) -> HashSet<u32> {
        locked(&self.commands).clone()
    }
    pub fn lock_commands(&self) -> MutexGuard<'_, HashSet<u32>> {
        locked(&self.commands)
    }
    pub fn lock_groups(&self) -> MutexGuard<'_, HashMap<u64, u32>> {
        locked(&self.groups)
    }
    pub fn lock_inputs(&self) -> MutexGuard<'_, HashMap<u64, mpsc::Sender<Input>>> {
        locked(&self.inputs)
    }
    pub fn lock_channels(&self) -> MutexGuard<'_, HashMap<u64, String>> {
        locked(&self.channels)
    }
    pub fn lock_terminals(&self) -> MutexGuard<'_, HashMap<u64, Arc<std::fs::File>>> {
        locked(&self.terminals)
    }
    pub fn lock_ports(&self) -> MutexGuard<'_, HashMap<u64, Arc<ports::Connection>>> {
        locked(&self.ports)
    }
    pub fn lock_watches(&self) -> MutexGuard<'_, HashMap<u64, Arc<std::sync::atomic::AtomicBool>>> {
        locked(&self.watches)
    }
    pub fn mark_exhausted(&self, pgid: u32) {
        locked(&self.exhausted).insert(pgid);
    }
    pub fn take_exhausted(&self, pgid: u32) -> bool {
        locked(&self.exhausted).remove(&pgid)
    }
}

static AGENT: OnceLock<Agent> = OnceLock::new();

/// The agent's shared state (made before any thread starts).
/// The file of secrets given as variables, beside this program.
const SECRET_ENV_FILE: &str = "secret-env.json";

/// The secrets given as variables (none when the host sent none).
fn secret_env() -> Vec<(String, String)> {
    let Some(path) = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.join(SECRET_ENV_FILE)))
    else {
        return Vec::new();
    };
    secret_env_of(&std::fs::read(path).unwrap_or_default())
}

/// The names and values of a secrets' file (a JSON object of strings).
fn secret_env_of(text: &[u8]) -> Vec<(String, String)> {
    match serde_json::from_slice::<serde_json::Map<String, Value>>(text) {
        Ok(values) => values
            .into_iter()
            .filter_map(|(name, value)| Some((name, value.as_str()?.to_string())))
            .collect(),
        Err(_) => Vec::new(),
    }
}

pub fn agent() -> &'static Agent {
    AGENT.get_or_init(Agent::from_env)
}

/// Runs one request on its thread, answering it whatever happens.
fn handle(req: Value) {
    let id = req.get("id").cloned().unwrap_or(Value::Null);
    let kind = req.get("type").and_then(Value::as_str).unwrap_or("");
    let answered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let reply = match kind {
            "exec" => return commands::exec(&req).map(|()| None),
            "connect" => return ports::connect(&req).map(|()| None),
            "watch" => watch::watch(&req).map(|()| serde_json::Map::new()),
            "read" => files::read(&req),
            "write" => files::write(&req),
            "list" => files::list(&req),
            "remove" => files::remove(&req),
            "stat" => files::stat(&req),
            "mkdir" => files::mkdir(&req),
            "move" => files::rename(&req),
            "channels" => Ok(channels()),
            other => Err(Refused::new(
                "protocol",
                format!("unknown request type {other:?}"),
            )),
        };
        reply.map(Some)
    }));
    match answered {
        Ok(Ok(Some(mut reply))) => {
            reply.insert("type".into(), json!("ok"));
            reply.insert("id".into(), id);
            send(&Value::Object(reply));
        }
        Ok(Ok(None)) => {}
        Ok(Err(refused)) => {
            if refused.kind == "pids" {
                // Every pid in use: end what used them up, and answer once
                // they are free, as an exec that ran does.
                pids::contain_exhaustion(None);
                pids::settle_pids();
            }
            refused.send(&id);
        }
        Err(_) => Refused::new("io", format!("the agent failed on a `{kind}` request")).send(&id),
    }
}

fn channels() -> serde_json::Map<String, Value> {
    let list: Vec<Value> = agent()
        .lock_channels()
        .iter()
        .map(|(id, command)| json!({"id": id, "command": command}))
        .collect();
    let mut reply = serde_json::Map::new();
    reply.insert("channels".into(), Value::Array(list));
    reply
}

/// One line from the host.
fn serve(line: &[u8]) {
    let Ok(req) = serde_json::from_slice::<Value>(line) else {
        return;
    };
    let a = agent();
    if let Some(id) = req.get("id").and_then(Value::as_u64) {
        a.next_id.fetch_max(id.saturating_add(1), Ordering::SeqCst);
    }
    match req.get("type").and_then(Value::as_str) {
        Some("input") => return commands::queue_input(&req),
        Some("signal") => return commands::signal(&req),
        Some("resize") => return commands::resize(&req),
        Some("ack") => return ports::ack(&req),
        Some("hangup") => {
            ports::hangup(&req);
            if let Some(id) = req.get("id").and_then(Value::as_u64) {
                watch::stop(id);
            }
            return;
        }
        // A host that attached after the agent started (a pod on a
        // cluster, a server restarted) missed the first `ready`: say it
        // again.
        Some("hello") => {
            return send(&json!({
                "type": "ready",
                "pid": std::process::id(),
                "next_id": a.next_id.load(Ordering::SeqCst),
            }))
        }
        _ => {}
    }
    // Every pid in use (a command's fork bomb): `spawn_thread` ends what
    // used them up and tries again for a moment; then this request is
    // refused rather than the agent ended.
    let id = req.get("id").cloned().unwrap_or(Value::Null);
    let req = Arc::new(Mutex::new(Some(req)));
    let started = spawn_thread(|| {
        let req = req.clone();
        move || {
            if let Some(req) = locked(&req).take() {
                handle(req);
            }
        }
    });
    if let Err(e) = started {
        Refused::new("pids", format!("no thread for the request: {e}")).send(&id);
    }
}

/// As PID 1 the agent inherits every orphan: it reaps the dead ones so they
/// do not use up the container's process limit (a fork bomb's remains), and
/// meanwhile watches that limit: a command about to use it up is ended.
fn reap_forever() {
    let own = std::process::id();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        if pids::near_pids_limit() {
            pids::contain_exhaustion(None);
        }
        // The process table is read only when something ended: an idle
        // session costs one read of its pids counter per round.
        if !sys::children_ended() {
            continue;
        }
        for (pid, p) in pids::processes() {
            // Children the agent runs itself are waited for by their runs.
            if p.state != b'Z' || p.ppid != own {
                continue;
            }
            let commands = agent().lock_commands();
            if !commands.contains(&pid) {
                sys::reap(pid);
            }
        }
    }
}

/// `--install-to PATH`: copies this program to `PATH` (mode 0755) and
/// exits. A cluster's pod runs the agent's image so as an init container,
/// putting the agent in a volume its main container then runs it from.
fn install_to(path: &str) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let binary = std::fs::read("/proc/self/exe")?;
    let temp = format!("{path}.part");
    std::fs::write(&temp, binary)?;
    std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o755))?;
    std::fs::rename(&temp, path)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, path] = args.as_slice() {
        if flag == "--install-to" {
            if let Err(e) = install_to(path) {
                eprintln!("dockhand agent: cannot install itself to {path}: {e}");
                std::process::exit(1);
            }
            return;
        }
    }
    // The shared state is read from the environment before any thread runs.
    agent();
    if let Err(e) = sys::make_undumpable() {
        eprintln!("dockhand agent: cannot make itself non-dumpable: {e}");
    }
    if let Err(e) = sys::watch_children() {
        eprintln!("dockhand agent: cannot watch for ended children: {e}");
    }
    let reaper = std::thread::Builder::new()
        .name("reaper".into())
        .stack_size(commands::STACK)
        .spawn(reap_forever);
    if let Err(e) = reaper {
        eprintln!("dockhand agent: no thread to reap orphans: {e}");
        std::process::exit(1);
    }
    send(&json!({"type": "ready", "pid": std::process::id()}));
    let mut input = BufReader::with_capacity(1 << 20, std::io::stdin().lock());
    let mut line = Vec::new();
    loop {
        line.clear();
        match input.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                if line.iter().any(|b| !b.is_ascii_whitespace()) {
                    serve(&line);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_secrets_file_gives_names_and_string_values() {
        assert_eq!(
            super::secret_env_of(br#"{"TOKEN": "abc", "N": 1, "B": "x=y"}"#),
            [
                ("B".to_string(), "x=y".to_string()),
                ("TOKEN".to_string(), "abc".to_string())
            ]
        );
        assert!(super::secret_env_of(b"").is_empty());
        assert!(super::secret_env_of(b"[1]").is_empty());
    }

    #[test]
    fn install_to_copies_the_running_program_executable() {
        let dir = std::env::temp_dir().join(format!("dh-install-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("session-agent");
        super::install_to(path.to_str().unwrap()).unwrap();
        let copied = std::fs::read(&path).unwrap();
        assert_eq!(copied, std::fs::read("/proc/self/exe").unwrap());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o755);
        assert!(!dir.join("session-agent.part").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
