//! envd's process service (`/process.Process/*`) on a session: commands
//! started, streamed, fed, signalled and listed, each outliving the stream
//! that started it, as envd's do.

use std::sync::Arc;

use axum::http::HeaderMap;
use axum::response::Response;
use base64::Engine as _;
use dockhand::session::{ExecEvent, SpawnOptions};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::broadcast;

use super::config::HOME;
use super::connect::{self, ConnectError};
use super::errors::file_error;
use super::process_table::{Event, Process, ProcessConfig, Selector};
use super::registry::Sandbox;

/// Output events kept for a slow reader before it misses some.
const BACKLOG: usize = 256;

#[derive(Deserialize, Default)]
#[serde(default)]
struct StartRequest {
    process: ProcessConfig,
    pty: Option<Value>,
    tag: Option<String>,
    stdin: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ProcessRequest {
    process: Selector,
    input: Option<Value>,
    signal: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct StreamInputRequest {
    start: Option<ProcessRequest>,
    data: Option<ProcessRequest>,
}

/// Quotes a word for `/bin/sh`.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The shell line that runs `cmd args...` as envd would (no shell of its own).
fn command_line(config: &ProcessConfig) -> String {
    let mut words = vec![quote(&config.cmd)];
    words.extend(config.args.iter().map(|a| quote(a)));
    format!("exec {}", words.join(" "))
}

/// envd's end event for an exit code (negative: killed by that signal).
fn end_event(code: i64) -> Value {
    if code >= 0 {
        json!({"exitCode": code, "exited": true, "status": format!("exit status {code}")})
    } else {
        let name = match -code {
            9 => "killed".to_string(),
            15 => "terminated".to_string(),
            2 => "interrupt".to_string(),
            1 => "hangup".to_string(),
            n => format!("signal {n}"),
        };
        json!({"exitCode": -1, "exited": false, "status": format!("signal: {name}")})
    }
}

fn event_message(event: Value) -> Value {
    json!({"event": event})
}

fn data_message(stream: &str, bytes: &[u8]) -> Value {
    let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
    event_message(json!({"data": {stream: b64}}))
}

/// `Start`: runs the command and streams it.
pub async fn start(sandbox: Arc<Sandbox>, headers: &HeaderMap, body: &[u8]) -> Response {
    let request: StartRequest = match connect::stream_request(headers, body) {
        Ok(r) => r,
        Err(e) => return connect::stream_error(e),
    };
    if request.process.cmd.is_empty() {
        return connect::stream_error(ConnectError::new("invalid_argument", "no command given"));
    }
    let terminal = request.pty.as_ref().map(terminal_size);
    // A terminal always takes input.
    let stdin = request.stdin.unwrap_or(false) || terminal.is_some();
    let mut options = SpawnOptions::new()
        .stdin(stdin)
        .cwd(request.process.cwd.clone().unwrap_or_else(|| HOME.into()));
    if let Some((rows, cols)) = terminal {
        options = options.pty(rows, cols);
    }
    for (name, value) in sandbox.envs.iter().chain(&request.process.envs) {
        options = options.env(name.clone(), value.clone());
    }
    if let Some(deadline) = connect::deadline(headers) {
        options = options.timeout(deadline);
    }
    let spawned = match sandbox
        .session
        .spawn(&command_line(&request.process), options)
        .await
    {
        Ok(s) => s,
        Err(e) => return connect::stream_error(file_error(&e)),
    };
    let (events, first_reader) = broadcast::channel(BACKLOG);
    let process = Arc::new(Process {
        pid: spawned.pid,
        tag: request.tag.clone(),
        config: json!({
            "cmd": request.process.cmd,
            "args": request.process.args,
            "envs": request.process.envs,
            "cwd": request.process.cwd,
        }),
        stdin,
        terminal: terminal.is_some(),
        control: spawned.control,
        events: events.clone(),
    });
    sandbox
        .processes
        .lock()
        .insert(spawned.pid, process.clone());
    sandbox.processes.remember(spawned.pid, &request.process);
    tokio::spawn(pump(sandbox.clone(), process.clone(), spawned.events));
    stream_events(spawned.pid, first_reader, connect::keepalive(headers))
}

/// Moves a command's output to its readers; forgets it when it ends.
async fn pump(
    sandbox: Arc<Sandbox>,
    process: Arc<Process>,
    mut output: futures::stream::BoxStream<'static, dockhand::Result<ExecEvent>>,
) {
    while let Some(event) = output.next().await {
        let event = match event {
            Ok(ExecEvent::Stdout(bytes)) if process.terminal => Event::Data("pty", bytes),
            Ok(ExecEvent::Stdout(bytes)) => Event::Data("stdout", bytes),
            Ok(ExecEvent::Stderr(bytes)) => Event::Data("stderr", bytes),
            Ok(ExecEvent::Exit(result)) => {
                sandbox.processes.ended(process.pid, result.exit_code);
                Event::End(end_event(result.exit_code))
            }
            Err(dockhand::Error::CommandTimeout { timeout, .. }) => {
                sandbox.processes.ended(process.pid, -9);
                Event::Failed(ConnectError::new(
                    "deadline_exceeded",
                    format!("the command ran past its timeout of {timeout:?} and was killed"),
                ))
            }
            Err(dockhand::Error::ProcessLimit { limit, .. }) => {
                sandbox.processes.ended(process.pid, -9);
                let mut end = end_event(-9);
                end["error"] = json!(format!(
                    "the command used up the sandbox's process limit ({limit}) and was killed with all it started"
                ));
                Event::End(end)
            }
            Err(e) => Event::Failed(ConnectError::new("unavailable", e.to_string())),
        };
        let last = !matches!(event, Event::Data(..));
        // Nobody listening is fine: the command runs on regardless.
        let _ = process.events.send(event);
        if last {
            break;
        }
    }
    let mut running = sandbox.processes.lock();
    if running
        .get(&process.pid)
        .is_some_and(|p| Arc::ptr_eq(p, &process))
    {
        running.remove(&process.pid);
    }
}

/// A command's events from now on: its start, output, end; keepalives
/// between them.
fn stream_events(
    pid: u32,
    events: broadcast::Receiver<Event>,
    keepalive: std::time::Duration,
) -> Response {
    let start =
        futures::stream::once(async move { Ok(event_message(json!({"start": {"pid": pid}}))) });
    let rest = futures::stream::unfold(Some(events), move |state| async move {
        let mut events = state?;
        loop {
            let next = tokio::time::timeout(keepalive, events.recv()).await;
            let item = match next {
                Err(_) => Ok(event_message(json!({"keepalive": {}}))),
                Ok(Ok(Event::Data(stream, bytes))) => Ok(data_message(stream, &bytes)),
                Ok(Ok(Event::End(end))) => {
                    return Some((Ok(event_message(json!({"end": end}))), None))
                }
                Ok(Ok(Event::Failed(e))) => return Some((Err(e), None)),
                Ok(Err(broadcast::error::RecvError::Lagged(missed))) => {
                    tracing::debug!(missed, "a slow reader missed output events");
                    continue;
                }
                Ok(Err(broadcast::error::RecvError::Closed)) => {
                    return Some((
                        Err(ConnectError::new(
                            "unavailable",
                            "the sandbox ended while the command ran",
                        )),
                        None,
                    ))
                }
            };
            return Some((item, Some(events)));
        }
    });
    connect::stream_response(start.chain(rest))
}

/// `Connect`: streams a running command's events from now on.
pub fn attach(sandbox: &Sandbox, headers: &HeaderMap, body: &[u8]) -> Response {
    let request: ProcessRequest = match connect::stream_request(headers, body) {
        Ok(r) => r,
        Err(e) => return connect::stream_error(e),
    };
    match sandbox.processes.find(&request.process) {
        Ok(p) => stream_events(p.pid, p.events.subscribe(), connect::keepalive(headers)),
        Err(e) => connect::stream_error(e),
    }
}

/// `List`: the running commands.
pub fn list(sandbox: &Sandbox) -> Response {
    let processes: Vec<Value> = sandbox
        .processes
        .lock()
        .values()
        .map(|p| {
            let mut info = json!({"pid": p.pid, "config": p.config});
            if let Some(tag) = &p.tag {
                info["tag"] = json!(tag);
            }
            info
        })
        .collect();
    connect::unary_response(Ok(json!({ "processes": processes })))
}

/// A `PTY` message's size as (rows, cols), within what a terminal takes.
fn terminal_size(pty: &Value) -> (u16, u16) {
    let side = |key: &str, default: u64| {
        pty.pointer(&format!("/size/{key}"))
            .and_then(Value::as_u64)
            .unwrap_or(default)
            .clamp(1, 1000) as u16
    };
    (side("rows", 24), side("cols", 80))
}

fn stdin_bytes(input: &Value) -> Result<Vec<u8>, ConnectError> {
    let text = input
        .get("stdin")
        .or_else(|| input.get("pty"))
        .and_then(Value::as_str)
        .unwrap_or("");
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| ConnectError::new("invalid_argument", format!("stdin is not base64: {e}")))
}

async fn feed(sandbox: &Sandbox, selector: &Selector, input: &Value) -> Result<(), ConnectError> {
    let process = sandbox.processes.find(selector)?;
    if !process.stdin {
        return Err(ConnectError::new(
            "failed_precondition",
            "the command was started without stdin (start it with stdin=True)",
        ));
    }
    let bytes = stdin_bytes(input)?;
    process
        .control
        .send_stdin(&bytes)
        .await
        .map_err(|e| ConnectError::new("unavailable", e.to_string()))
}

/// `SendInput`: bytes for a command's stdin.
pub async fn send_input(sandbox: &Sandbox, headers: &HeaderMap, body: &[u8]) -> Response {
    let result = async {
        let request: ProcessRequest = connect::unary_request(headers, body)?;
        feed(
            sandbox,
            &request.process,
            &request.input.unwrap_or_default(),
        )
        .await?;
        Ok(json!({}))
    }
    .await;
    connect::unary_response(result)
}

/// `StreamInput`: a client stream of stdin chunks (read whole, in order).
pub async fn stream_input(sandbox: &Sandbox, headers: &HeaderMap, body: &[u8]) -> Response {
    let result = async {
        let messages: Vec<StreamInputRequest> = connect::stream_messages(headers, body)?;
        let mut selector = None;
        for message in messages {
            if let Some(start) = message.start {
                selector = Some(start.process);
            }
            if let Some(data) = message.data {
                let Some(selector) = &selector else {
                    return Err(ConnectError::new(
                        "invalid_argument",
                        "input before the start message",
                    ));
                };
                feed(sandbox, selector, &data.input.unwrap_or_default()).await?;
            }
        }
        Ok(json!({}))
    }
    .await;
    // A client stream answers with one enveloped message.
    match result {
        Ok(message) => connect::stream_response(futures::stream::once(async { Ok(message) })),
        Err(e) => connect::stream_error(e),
    }
}

/// `Update`: a terminal's new size.
pub async fn update(sandbox: &Sandbox, headers: &HeaderMap, body: &[u8]) -> Response {
    let result = async {
        let request: UpdateRequest = connect::unary_request(headers, body)?;
        let process = sandbox.processes.find(&request.process)?;
        let Some(pty) = request.pty.filter(|_| process.terminal) else {
            return Err(ConnectError::new(
                "failed_precondition",
                "only a command started with a PTY can be resized",
            ));
        };
        let (rows, cols) = terminal_size(&pty);
        process
            .control
            .resize(rows, cols)
            .await
            .map_err(|e| ConnectError::new("unavailable", e.to_string()))?;
        Ok(json!({}))
    }
    .await;
    connect::unary_response(result)
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct UpdateRequest {
    process: Selector,
    pty: Option<Value>,
}

/// `CloseStdin`.
pub async fn close_stdin(sandbox: &Sandbox, headers: &HeaderMap, body: &[u8]) -> Response {
    let result = async {
        let request: ProcessRequest = connect::unary_request(headers, body)?;
        let process = sandbox.processes.find(&request.process)?;
        process
            .control
            .close_stdin()
            .await
            .map_err(|e| ConnectError::new("unavailable", e.to_string()))?;
        Ok(json!({}))
    }
    .await;
    connect::unary_response(result)
}

/// The signal a request names (`SIGNAL_SIGKILL` or 9, `SIGNAL_SIGTERM` or 15).
fn signal_number(signal: Option<&Value>) -> Result<i32, ConnectError> {
    match signal {
        Some(Value::String(name)) if name == "SIGNAL_SIGKILL" => Ok(9),
        Some(Value::String(name)) if name == "SIGNAL_SIGTERM" => Ok(15),
        Some(Value::Number(n)) if matches!(n.as_i64(), Some(9) | Some(15)) => {
            Ok(n.as_i64().unwrap_or(9) as i32)
        }
        other => Err(ConnectError::new(
            "invalid_argument",
            format!("signal {other:?} is not SIGNAL_SIGKILL or SIGNAL_SIGTERM"),
        )),
    }
}

/// `SendSignal`.
pub async fn send_signal(sandbox: &Sandbox, headers: &HeaderMap, body: &[u8]) -> Response {
    let result = async {
        let request: ProcessRequest = connect::unary_request(headers, body)?;
        let signal = signal_number(request.signal.as_ref())?;
        let process = sandbox.processes.find(&request.process)?;
        process
            .control
            .signal(signal)
            .await
            .map_err(|e| ConnectError::new("unavailable", e.to_string()))?;
        Ok(json!({}))
    }
    .await;
    connect::unary_response(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_quoted_for_the_shell() {
        let config = ProcessConfig {
            cmd: "/bin/bash".into(),
            args: vec![
                "-l".into(),
                "-c".into(),
                "echo 'it''s' \"$HOME\"; ls".into(),
            ],
            ..Default::default()
        };
        assert_eq!(
            command_line(&config),
            r#"exec '/bin/bash' '-l' '-c' 'echo '\''it'\'''\''s'\'' "$HOME"; ls'"#
        );
    }

    #[test]
    fn ends_read_as_envd_writes_them() {
        assert_eq!(end_event(0)["status"], "exit status 0");
        assert_eq!(end_event(3)["exitCode"], 3);
        let killed = end_event(-9);
        assert_eq!(
            (killed["exitCode"].as_i64(), killed["status"].as_str()),
            (Some(-1), Some("signal: killed"))
        );
        assert_eq!(killed["exited"], false);
    }

    #[test]
    fn terminal_sizes_are_read_and_bounded() {
        assert_eq!(
            terminal_size(&json!({"size": {"rows": 30, "cols": 100}})),
            (30, 100)
        );
        assert_eq!(terminal_size(&json!({})), (24, 80));
        assert_eq!(
            terminal_size(&json!({"size": {"rows": 0, "cols": 99999}})),
            (1, 1000)
        );
    }

    #[test]
    fn signals_are_named_or_numbered() {
        assert_eq!(signal_number(Some(&json!("SIGNAL_SIGKILL"))), Ok(9));
        assert_eq!(signal_number(Some(&json!(15))), Ok(15));
        assert_eq!(
            signal_number(Some(&json!("SIGNAL_SIGSTOP")))
                .unwrap_err()
                .code,
            "invalid_argument"
        );
        assert!(signal_number(None).is_err());
    }
}
