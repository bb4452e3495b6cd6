//! A scripted session agent behind the `agent` container's attach stream.
//!
//! It speaks the agent's JSON-lines protocol as the real agent does, for a
//! few requests: `hello` (answered with `ready`), `exec` of `echo …`,
//! `exit N` and `printenv NAME` (anything else exits 127), and `write` /
//! `read` of files it keeps in memory. When its stdin closes it ends, and
//! the kubelet records its container as terminated, as `stdinOnce` does.

use axum::extract::ws::WebSocket;
use base64::Engine as _;
use serde_json::{json, Value};

use super::kubelet::converse_lines;
use super::Shared;

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// Answers one request; `None` for requests without a reply.
fn answer(fake: &Shared, pod: &str, request: &Value) -> Option<Value> {
    let id = request["id"].clone();
    match request["type"].as_str()? {
        "hello" => Some(json!({"type": "ready", "pid": 1})),
        "exec" => {
            let command = request["command"].as_str().unwrap_or("");
            let env = fake.record(|r| {
                r.pods
                    .get(pod)
                    .map(|p| p["spec"]["containers"][0]["env"].clone())
                    .unwrap_or_default()
            });
            let (code, stdout, stderr) = run(command, &env);
            Some(
                json!({"type": "exit", "id": id, "code": code, "timed_out": false,
                        "stdout": b64(stdout.as_bytes()), "stderr": b64(stderr.as_bytes()),
                        "stdout_truncated": false, "stderr_truncated": false}),
            )
        }
        "write" => {
            let data = base64::engine::general_purpose::STANDARD
                .decode(request["data"].as_str().unwrap_or(""))
                .unwrap_or_default();
            let path = request["path"].as_str().unwrap_or("").to_string();
            fake.record(|r| r.session_files.insert((pod.to_string(), path), data));
            Some(json!({"type": "ok", "id": id}))
        }
        "read" => {
            let path = request["path"].as_str().unwrap_or("").to_string();
            match fake.record(|r| {
                r.session_files
                    .get(&(pod.to_string(), path.clone()))
                    .cloned()
            }) {
                Some(data) => Some(json!({"type": "ok", "id": id, "data": b64(&data)})),
                None => Some(json!({"type": "error", "id": id, "kind": "not_found",
                                    "message": format!("{path}: No such file or directory")})),
            }
        }
        _ => Some(json!({"type": "error", "id": id, "kind": "other",
                         "message": "not scripted in the simulation"})),
    }
}

/// The scripted shell: `(exit code, stdout, stderr)`.
fn run(command: &str, env: &Value) -> (i64, String, String) {
    if let Some(text) = command.strip_prefix("echo ") {
        return (0, format!("{text}\n"), String::new());
    }
    if let Some(code) = command.strip_prefix("exit ") {
        return (
            code.trim().parse().unwrap_or(2),
            String::new(),
            String::new(),
        );
    }
    if let Some(name) = command.strip_prefix("printenv ") {
        // The kubelet resolves secretKeyRef values; the simulation says
        // where a value would come from instead.
        let found = env
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == json!(name));
        return match found {
            Some(e) if e["value"].is_string() => (
                0,
                format!("{}\n", e["value"].as_str().unwrap()),
                String::new(),
            ),
            Some(e) => (0, format!("from {}\n", e["valueFrom"]), String::new()),
            None => (1, String::new(), String::new()),
        };
    }
    (127, String::new(), format!("sh: 1: {command}: not found\n"))
}

pub(super) async fn converse(fake: Shared, pod: String, socket: WebSocket) {
    let answer = |request: &Value| answer(&fake, &pod, request);
    converse_lines(&fake, &pod, "agent", socket, answer).await;
}
