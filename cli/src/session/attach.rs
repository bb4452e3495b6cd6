//! `dockhand session attach ID`: the user's terminal on an interactive shell
//! in the session. Both ends of the keeper's socket are here: the command
//! (raw mode, window size, input) and the keeper's side (a shell on a
//! terminal in the container, through `Session::pty_with`).
//!
//! After the `attach` request line, the keeper sends JSON lines
//! `{"output": base64}`, then `{"exit_code": n}` (or `{"error": ...}`); the
//! command sends `{"input": base64}` and `{"resize": {"rows", "cols"}}`.
//! A command that goes away hangs the shell up, as closing a terminal does.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, Result};
use base64::Engine as _;
use dockhand::session::{ExecEvent, Session, SpawnOptions};
use futures::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;

/// How long a hung-up shell has to end before its group is killed.
const HANGUP_GRACE: Duration = Duration::from_secs(3);
/// A window no terminal reports: rows and columns are kept within it.
const MAX_SIDE: u64 = 1000;

fn encode(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// The terminal's settings as they were, put back when this is dropped
/// (on every way out, a panic's included).
struct RawMode {
    saved: libc::termios,
}

impl RawMode {
    /// Puts the terminal on stdin into raw mode: keys go to the session as
    /// they are typed, `Ctrl-C` included. `None` when stdin is no terminal.
    fn enter() -> Result<Option<RawMode>> {
        // SAFETY: isatty, tcgetattr, cfmakeraw and tcsetattr on stdin, with
        // a termios this function owns.
        unsafe {
            if libc::isatty(0) != 1 {
                return Ok(None);
            }
            let mut settings: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut settings) != 0 {
                return Err(std::io::Error::last_os_error()).context("reading the terminal's mode");
            }
            let saved = settings;
            libc::cfmakeraw(&mut settings);
            if libc::tcsetattr(0, libc::TCSANOW, &settings) != 0 {
                return Err(std::io::Error::last_os_error()).context("setting raw mode");
            }
            Ok(Some(RawMode { saved }))
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: restores settings read from the same descriptor.
        unsafe {
            libc::tcsetattr(0, libc::TCSANOW, &self.saved);
        }
    }
}

/// Rows and columns of the terminal on stdout (else stdin), if any.
fn window_size() -> Option<(u16, u16)> {
    for fd in [1, 0] {
        // SAFETY: TIOCGWINSZ fills the winsize it is given.
        let size = unsafe {
            let mut size: libc::winsize = std::mem::zeroed();
            (libc::ioctl(fd, libc::TIOCGWINSZ, &mut size) == 0).then_some(size)
        };
        if let Some(size) = size.filter(|s| s.ws_row > 0 && s.ws_col > 0) {
            return Some((size.ws_row, size.ws_col));
        }
    }
    None
}

/// Reads stdin on a thread of its own (a blocking read the runtime must not
/// wait for at exit); `None` arrives at its end.
fn stdin_chunks() -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(16);
    let reader = std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                match std::io::Read::read(&mut std::io::stdin(), &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if tx.blocking_send(buf[..n].to_vec()).is_err() {
                            break;
                        }
                    }
                }
            }
        });
    // Without the thread there is no input: the session still shows output.
    drop(reader);
    rx
}

/// The command, on a connection to the session's keeper: attaches the
/// user's terminal until the shell exits; exits with the shell's exit code.
pub async fn attach(keeper: tokio::net::UnixStream) -> Result<ExitCode> {
    let (read, mut write) = keeper.into_split();
    let (rows, cols) = window_size().unwrap_or((24, 80));
    let request = json!({
        "op": "attach",
        "rows": rows,
        "cols": cols,
        "term": std::env::var("TERM").ok(),
    });
    write.write_all(format!("{request}\n").as_bytes()).await?;
    let raw = RawMode::enter()?;
    let mut input = stdin_chunks();
    let mut input_open = true;
    let mut resized =
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())?;
    let mut lines = BufReader::new(read).lines();
    let mut stdout = tokio::io::stdout();
    loop {
        tokio::select! {
            line = lines.next_line() => {
                let Some(line) = line.context("reading from the session's keeper")? else {
                    drop(raw);
                    anyhow::bail!("the session's keeper went away (was the session closed?)");
                };
                let message: Value = serde_json::from_str(&line)
                    .context("the session's keeper sent something that is not JSON")?;
                if let Some(data) = message["output"].as_str() {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(data)
                        .context("the keeper's output is not base64")?;
                    stdout.write_all(&bytes).await?;
                    stdout.flush().await?;
                } else if let Some(code) = message["exit_code"].as_i64() {
                    drop(raw);
                    return Ok(ExitCode::from(u8::try_from(code).unwrap_or(1)));
                } else if let Some(e) = message["error"].as_str() {
                    drop(raw);
                    return Err(crate::outcome::Relayed {
                        message: e.to_string(),
                        exit_code: message["exit_code_of_error"]
                            .as_u64()
                            .and_then(|c| u8::try_from(c).ok())
                            .unwrap_or(crate::outcome::INTERNAL),
                    }
                    .into());
                }
            }
            chunk = input.recv(), if input_open => match chunk {
                Some(bytes) => {
                    let line = json!({"input": encode(&bytes)});
                    write.write_all(format!("{line}\n").as_bytes()).await?;
                }
                // Input ended (a pipe, not a terminal): the shell runs on
                // until it exits, as it would after a script's last line.
                None => input_open = false,
            },
            _ = resized.recv() => {
                if let Some((rows, cols)) = window_size() {
                    let line = json!({"resize": {"rows": rows, "cols": cols}});
                    write.write_all(format!("{line}\n").as_bytes()).await?;
                }
            }
        }
    }
}

fn side(v: &Value, default: u16) -> u16 {
    v.as_u64()
        .map(|n| n.clamp(1, MAX_SIDE) as u16)
        .unwrap_or(default)
}

async fn send(write: &mut OwnedWriteHalf, message: Value) -> bool {
    write
        .write_all(format!("{message}\n").as_bytes())
        .await
        .is_ok()
}

/// The keeper's side of one `attach`: runs a shell on a terminal in the
/// session and relays it to the command until the shell exits. A command
/// that goes away (closed, killed, its connection cut) hangs the shell up;
/// one that has not ended a moment later is killed with all it started.
pub async fn serve_terminal(
    session: Session,
    request: Value,
    reader: BufReader<OwnedReadHalf>,
    mut write: OwnedWriteHalf,
) {
    let rows = side(&request["rows"], 24);
    let cols = side(&request["cols"], 80);
    let mut options = SpawnOptions::new();
    if let Some(term) = request["term"].as_str().filter(|t| !t.is_empty()) {
        options = options.env("TERM", term);
    }
    let mut shell = match session.pty_with(rows, cols, options).await {
        Ok(shell) => shell,
        Err(e) => {
            let e = anyhow::Error::from(e);
            let message = json!({"error": format!("{e:#}"), "exit_code_of_error": crate::outcome::code_of(&e)});
            send(&mut write, message).await;
            return;
        }
    };
    let mut lines = reader.lines();
    let mut attached = true;
    let mut hung_up = false;
    // When a hung-up shell that has not ended is killed.
    let mut kill_at: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            event = shell.events.next() => match event {
                Some(Ok(ExecEvent::Stdout(bytes) | ExecEvent::Stderr(bytes))) => {
                    if attached && !send(&mut write, json!({"output": encode(&bytes)})).await {
                        attached = false;
                    }
                }
                Some(Ok(ExecEvent::Exit(result))) => {
                    if attached {
                        send(&mut write, json!({"exit_code": result.exit_code})).await;
                    }
                    return;
                }
                Some(Err(e)) => {
                    if attached {
                        send(&mut write, json!({"error": format!("the session's shell: {e}")})).await;
                    }
                    return;
                }
                None => return,
            },
            line = lines.next_line(), if attached => match line {
                Ok(Some(line)) => {
                    let message: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                    if let Some(data) = message["input"].as_str() {
                        if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data) {
                            let _ = shell.control.send_stdin(&bytes).await;
                        }
                    } else if message.get("resize").is_some() {
                        let size = &message["resize"];
                        let _ = shell.control.resize(side(&size["rows"], rows), side(&size["cols"], cols)).await;
                    }
                }
                Ok(None) | Err(_) => attached = false,
            },
            _ = async {
                match kill_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            } => {
                let _ = shell.control.signal(libc::SIGKILL).await;
                kill_at = None;
            }
        }
        if !attached && !hung_up {
            let _ = shell.control.signal(libc::SIGHUP).await;
            hung_up = true;
            kill_at = Some(tokio::time::Instant::now() + HANGUP_GRACE);
        }
    }
}
