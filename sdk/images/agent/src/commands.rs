//! Commands: started in a session of their own (a process group the host
//! can signal), on pipes or a terminal, their output kept up to a limit and
//! streamed, ended at their time limit or when they use up the pids.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::agent;
use crate::paths::resolve;
use crate::pids::{
    contain_exhaustion, fork_refusals, group_size, near_pids_limit, settle_group, with_pids,
};
use crate::reply::{b64, send, unb64, Refused};
use crate::sys::{group_alive, kill_group, new_session, openpty, pidfd_open, readable, set_window};

/// What a thread of the agent's own may use for its stack: requests parse
/// JSON and copy bytes on the heap.
pub const STACK: usize = 256 << 10;

/// One stream's kept bytes.
#[derive(Default)]
struct Kept {
    bytes: Vec<u8>,
    cut: bool,
}

/// Input for a command that keeps its stdin open: bytes, or `None` to close.
pub type Input = Option<Vec<u8>>;

/// Starts a thread, tried again while the pids are used up.
pub fn spawn_thread<F>(make: impl Fn() -> F) -> std::io::Result<thread::JoinHandle<()>>
where
    F: FnOnce() + Send + 'static,
{
    with_pids(|| thread::Builder::new().stack_size(STACK).spawn(make()))
}

fn u16_of(v: &Value, name: &str, default: u16) -> u16 {
    v.get(name)
        .and_then(Value::as_u64)
        .filter(|n| *n > 0)
        .map_or(default, |n| n.min(u16::MAX as u64) as u16)
}

/// Runs an `exec` request to its end, sending its `exit`.
pub fn exec(req: &Value) -> Result<(), Refused> {
    let a = agent();
    let rid = req
        .get("id")
        .and_then(Value::as_u64)
        .ok_or_else(|| Refused::missing("id"))?;
    let command = req
        .get("command")
        .and_then(Value::as_str)
        .ok_or_else(|| Refused::missing("command"))?
        .to_string();
    let limit = req
        .get("output_limit")
        .and_then(Value::as_u64)
        .unwrap_or(1 << 20) as usize;
    let stream = req.get("stream").and_then(Value::as_bool) == Some(true);
    // The agent's own environment (not necessarily UTF-8), less what only
    // the agent reads, plus the request's.
    let mut env: BTreeMap<OsString, OsString> = std::env::vars_os()
        .filter(|(k, _)| k != "DOCKHAND_ROOTS")
        .collect();
    for (name, value) in &a.secret_env {
        env.insert(name.into(), value.into());
    }
    if let Some(extra) = req.get("env").and_then(Value::as_object) {
        for (k, v) in extra {
            if let Some(v) = v.as_str() {
                env.insert(k.into(), v.into());
            }
        }
    }
    let cwd_asked = req
        .get("cwd")
        .and_then(Value::as_str)
        .filter(|c| !c.is_empty())
        .unwrap_or(&a.workspace);
    let cwd = resolve(cwd_asked)?;
    let stdin = match req.get("stdin").and_then(Value::as_str) {
        Some(text) => Some(unb64(text)?),
        None => None,
    };
    let keep_stdin = req.get("keep_stdin").and_then(Value::as_bool) == Some(true);
    let refused_before = fork_refusals();
    let terminal = req
        .get("pty")
        .filter(|p| p.is_object())
        .map(|p| (u16_of(p, "rows", 24), u16_of(p, "cols", 80)));

    let mut master: Option<Arc<File>> = None;
    let spawned = with_pids(|| {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(&command)
            .current_dir(&cwd)
            .env_clear()
            .envs(&env);
        let slave = match terminal {
            Some((rows, cols)) => {
                let (m, s) = openpty(rows, cols)?;
                cmd.stdin(Stdio::from(s.try_clone()?))
                    .stdout(Stdio::from(s.try_clone()?))
                    .stderr(Stdio::from(s.try_clone()?));
                master = Some(Arc::new(File::from(m)));
                Some(s)
            }
            None => {
                let input = stdin.is_some() || keep_stdin;
                cmd.stdin(if input { Stdio::piped() } else { Stdio::null() })
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                None
            }
        };
        let take_terminal = slave.is_some();
        // SAFETY: setsid and an ioctl, both async-signal-safe.
        unsafe { cmd.pre_exec(move || new_session(take_terminal)) };
        let mut commands = a.commands.lock().unwrap_or_else(|e| e.into_inner());
        let child = cmd.spawn()?;
        commands.insert(child.id());
        // The terminal's other side is the command's alone now: its end
        // reads EIO on the master once the command's last process exits.
        drop(cmd);
        drop(slave);
        Ok(child)
    });
    let mut child = match spawned {
        Ok(child) => child,
        // Commands are run by the image's shell: an image without one (a
        // distroless image, say) is told apart from a missing directory.
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) && cwd.is_dir() => {
            return Err(Refused::new(
                "io",
                format!("cannot run `{command}`: the image has no /bin/sh to run commands with"),
            ));
        }
        Err(e) => {
            return Err(Refused::os(
                &format!("starting `{command}` in {cwd_asked}"),
                &e,
            ));
        }
    };
    let pid = child.id();
    a.lock_groups().insert(rid, pid);
    if keep_stdin && master.is_none() {
        a.lock_channels().insert(rid, command.clone());
    }
    if let Some(m) = &master {
        a.lock_terminals().insert(rid, m.clone());
    }
    let mut stdin = stdin;
    let ran = (|| -> std::io::Result<()> {
        // Its input queue exists before anyone learns the pid: the host
        // sends input (and the close) as soon as `started` arrives, and the
        // reading loop drops input for an id it does not know.
        if let Some(m) = &master {
            feed_inputs(rid, Sink::Terminal(m.clone()))?;
        } else if keep_stdin {
            if let Some(pipe) = child.stdin.take() {
                feed_inputs(rid, Sink::Pipe(Arc::new(Mutex::new(Some(pipe)))))?;
            }
            stdin = None;
        }
        if req.get("report_pid").and_then(Value::as_bool) == Some(true) {
            send(&json!({"type": "started", "id": rid, "pid": pid}));
        }
        run(
            req,
            rid,
            &mut child,
            stdin,
            limit,
            stream,
            refused_before,
            master.clone(),
        )
    })();
    if ran.is_err() {
        // Could not watch the command (no thread to read it, say, when it
        // used up every pid): end it and all it started, now.
        kill_group(pid, libc::SIGKILL);
        let _ = child.wait();
    }
    a.lock_commands().remove(&pid);
    a.lock_groups().remove(&rid);
    a.lock_channels().remove(&rid);
    a.lock_terminals().remove(&rid);
    if let Some(pending) = a.lock_inputs().get(&rid) {
        let _ = pending.send(None);
    }
    ran.map_err(|e| Refused::os(&format!("running `{command}`"), &e))
}

/// Where a command's (or a port connection's) input goes.
#[derive(Clone)]
pub enum Sink {
    Terminal(Arc<File>),
    Pipe(Arc<Mutex<Option<std::process::ChildStdin>>>),
    /// A connection to a port in the container: each write is acked to the
    /// host, which sends no more than a window ahead of the acks.
    Socket(Arc<std::net::TcpStream>),
}

/// Writes `input` requests to the command's stdin (or terminal) in the
/// order they came, on a thread of its own: a command that stops reading
/// blocks only that.
pub fn feed_inputs(rid: u64, sink: Sink) -> std::io::Result<()> {
    let (tx, rx) = mpsc::channel::<Input>();
    let rx = Arc::new(Mutex::new(Some(rx)));
    agent().lock_inputs().insert(rid, tx);
    let started = spawn_thread(|| {
        let (rx, sink) = (rx.clone(), sink.clone());
        move || {
            let Some(rx) = rx.lock().ok().and_then(|mut r| r.take()) else {
                return;
            };
            while let Ok(Some(data)) = rx.recv() {
                let written = match &sink {
                    Sink::Terminal(m) => (&**m).write_all(&data),
                    Sink::Pipe(p) => match p.lock().ok().as_mut().and_then(|p| p.as_mut()) {
                        Some(pipe) => pipe.write_all(&data).and_then(|_| pipe.flush()),
                        None => Ok(()),
                    },
                    Sink::Socket(socket) => (&**socket).write_all(&data).map(|()| {
                        send(&json!({"type": "ack", "id": rid, "bytes": data.len()}));
                    }),
                };
                if written.is_err() {
                    break;
                }
            }
            agent().lock_inputs().remove(&rid);
            if let Sink::Socket(socket) = &sink {
                let _ = socket.shutdown(std::net::Shutdown::Write);
            }
            if let Sink::Pipe(p) = &sink {
                if let Ok(mut p) = p.lock() {
                    p.take();
                }
            }
        }
    });
    if started.is_err() {
        agent().lock_inputs().remove(&rid);
    }
    started.map(drop)
}

/// Queues an `input` request (on the reading loop, so inputs keep their
/// order); input for an id the agent does not know is dropped.
pub fn queue_input(req: &Value) {
    let Some(rid) = req.get("id").and_then(Value::as_u64) else {
        return;
    };
    let inputs = agent().lock_inputs();
    let Some(pending) = inputs.get(&rid) else {
        return;
    };
    if let Some(data) = req.get("data").and_then(Value::as_str) {
        if let Ok(bytes) = unb64(data) {
            if !bytes.is_empty() {
                let _ = pending.send(Some(bytes));
            }
        }
    }
    if req.get("close").and_then(Value::as_bool) == Some(true) {
        let _ = pending.send(None);
    }
}

/// A signal for a running command's process group (on the reading loop):
/// a signal for a command that has ended (or never was) is a no-op, never
/// a signal to a reused pid.
pub fn signal(req: &Value) {
    let Some(rid) = req.get("id").and_then(Value::as_u64) else {
        return;
    };
    let sig = req
        .get("signal")
        .and_then(Value::as_i64)
        .filter(|s| *s != 0)
        .unwrap_or(libc::SIGKILL as i64) as libc::c_int;
    if ![libc::SIGKILL, libc::SIGTERM, libc::SIGINT, libc::SIGHUP].contains(&sig) {
        return;
    }
    let groups = agent().lock_groups();
    if let Some(pgid) = groups.get(&rid) {
        kill_group(*pgid, sig);
    }
}

/// A new size for a command's terminal; a command without one is ignored.
pub fn resize(req: &Value) {
    let Some(rid) = req.get("id").and_then(Value::as_u64) else {
        return;
    };
    if let Some(m) = agent().lock_terminals().get(&rid) {
        let _ = set_window(
            m.as_raw_fd(),
            u16_of(req, "rows", 24),
            u16_of(req, "cols", 80),
        );
    }
}

/// Reads one of the command's streams to its end, keeping up to `limit`
/// bytes and streaming chunks if asked.
fn pump(
    source: Arc<File>,
    name: &'static str,
    rid: u64,
    kept: Arc<Mutex<Kept>>,
    limit: usize,
    stream: bool,
) {
    let mut buffer = vec![0u8; 64 << 10];
    loop {
        // A terminal whose last writer is gone reads EIO: its end.
        let n = match (&*source).read(&mut buffer) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buffer[..n];
        {
            let mut k = kept.lock().unwrap_or_else(|e| e.into_inner());
            let room = limit.saturating_sub(k.bytes.len());
            k.bytes.extend_from_slice(&chunk[..room.min(n)]);
            if n > room {
                k.cut = true;
            }
        }
        if stream {
            send(&json!({"type": "chunk", "id": rid, "stream": name, "data": b64(chunk)}));
        }
    }
}

/// One of a command's output streams and where its bytes are kept.
type Source = (&'static str, Arc<File>, Arc<Mutex<Kept>>);

fn file_of(fd: impl Into<OwnedFd>) -> Arc<File> {
    Arc::new(File::from(fd.into()))
}

#[allow(clippy::too_many_arguments)]
fn run(
    req: &Value,
    rid: u64,
    child: &mut Child,
    stdin: Option<Vec<u8>>,
    limit: usize,
    stream: bool,
    refused_before: u64,
    master: Option<Arc<File>>,
) -> std::io::Result<()> {
    let a = agent();
    let pid = child.id();
    let (stdout, stderr) = (
        Arc::new(Mutex::new(Kept::default())),
        Arc::new(Mutex::new(Kept::default())),
    );
    // A terminal's output counts as stdout: it is one stream.
    let mut sources: Vec<Source> = Vec::new();
    match &master {
        Some(m) => sources.push(("stdout", m.clone(), stdout.clone())),
        None => {
            if let Some(out) = child.stdout.take() {
                sources.push(("stdout", file_of(out), stdout.clone()));
            }
            if let Some(err) = child.stderr.take() {
                sources.push(("stderr", file_of(err), stderr.clone()));
            }
        }
    }
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let readers = sources.len();
    for (name, source, kept) in sources {
        spawn_thread(|| {
            let (source, kept, done) = (source.clone(), kept.clone(), done_tx.clone());
            move || {
                pump(source, name, rid, kept, limit, stream);
                let _ = done.send(());
            }
        })?;
    }
    drop(done_tx);
    if let (Some(data), Some(pipe)) = (stdin, child.stdin.take()) {
        let pipe = Arc::new(Mutex::new(Some(pipe)));
        let data = Arc::new(data);
        spawn_thread(|| {
            let (pipe, data) = (pipe.clone(), data.clone());
            move || {
                if let Some(mut pipe) = pipe.lock().ok().and_then(|mut p| p.take()) {
                    let _ = pipe.write_all(&data);
                }
            }
        })?;
    }
    let deadline = req
        .get("timeout_s")
        .and_then(Value::as_f64)
        .filter(|t| t.is_finite() && *t >= 0.0)
        .map(|t| Instant::now() + Duration::from_secs_f64(t.min(1e9)));
    let mut timed_out = false;
    let pidfd = pidfd_open(pid);
    let status = loop {
        // In short waits: a command whose forks the pids limit refuses is
        // ended at once, even if it fell apart and one process waits on.
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let wait = left.map_or(Duration::from_millis(100), |l| {
            l.min(Duration::from_millis(100))
        });
        match &pidfd {
            Some(fd) => {
                readable(fd, wait);
            }
            None => thread::sleep(wait.min(Duration::from_millis(10))),
        }
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if left.is_some_and(|l| l.is_zero()) {
            timed_out = true;
        } else if fork_refusals() > refused_before {
            a.mark_exhausted(pid);
        } else {
            continue;
        }
        kill_group(pid, libc::SIGKILL);
        break child.wait()?;
    };
    drop(pidfd);
    if let (false, Some(deadline), true) = (timed_out, deadline, group_alive(pid)) {
        // What the command left running in its process group (background
        // jobs, a fork bomb's remains) lives until the command's time limit.
        let _ = spawn_thread(|| {
            move || {
                thread::sleep(deadline.saturating_duration_since(Instant::now()));
                kill_group(pid, libc::SIGKILL);
            }
        });
    }
    // Background children may keep the pipes open; do not wait for them
    // forever.
    let each = if timed_out {
        Duration::from_millis(500)
    } else {
        Duration::from_secs(5)
    };
    for _ in 0..readers {
        if done_rx.recv_timeout(each).is_err() {
            break;
        }
    }
    let code = status
        .code()
        .map(i64::from)
        .or_else(|| status.signal().map(|s| -(s as i64)))
        .unwrap_or(-1);
    if near_pids_limit() && (code != 0 || group_size(pid) > 0) {
        // Ended, but what it started holds the pids (its shell may have
        // exited for want of a fork before the watch saw it). A command that
        // succeeded and left nothing is not to blame for pids others still
        // hold (a bomb's remains being ended as it ran).
        contain_exhaustion(Some(pid));
    } else if code != 0 && fork_refusals() > refused_before {
        // The limit refused forks while it ran, and it has already fallen
        // apart (each part that could not fork gave up): still its doing.
        a.mark_exhausted(pid);
        kill_group(pid, libc::SIGKILL);
    }
    let exhausted = a.take_exhausted(pid);
    if exhausted {
        // Answer once the processes are gone, so the next request finds
        // its pids free.
        settle_group(pid);
    }
    let (out, err) = (
        stdout.lock().unwrap_or_else(|e| e.into_inner()),
        stderr.lock().unwrap_or_else(|e| e.into_inner()),
    );
    send(&json!({
        "type": "exit", "id": rid, "code": code, "timed_out": timed_out,
        "stdout": b64(&out.bytes), "stderr": b64(&err.bytes),
        "stdout_truncated": out.cut, "stderr_truncated": err.cut,
        "pids_exhausted": exhausted,
    }));
    Ok(())
}
