//! A scripted code host bridge behind the `bridge` container's attach stream.
//!
//! It speaks the bridge's JSON-lines protocol for a few messages: `hello`
//! (answered with `ready`), and `execute`, which calls the first offered
//! tool with the inputs as keyword arguments and ends with the tool's value
//! (or, with no tool, with the inputs), printing what it did. It runs no
//! interpreter: the code itself is only recorded.

use axum::extract::ws::WebSocket;
use serde_json::{json, Value};

use super::kubelet::converse_lines;
use super::Shared;

/// The execution under way: (id, tool called).
type Pending = Option<(String, String)>;

fn answer(pending: &mut Pending, request: &Value) -> Option<Value> {
    match request["type"].as_str() {
        Some("hello") => Some(json!({"type": "ready", "pid": 1})),
        Some("execute") => {
            let id = request["id"].as_str().unwrap_or("").to_string();
            match request["tools"].as_array().and_then(|t| t.first()) {
                Some(tool) => {
                    let tool = tool.as_str().unwrap_or("").to_string();
                    *pending = Some((id, tool.clone()));
                    Some(json!({"type": "tool_call", "call": 1, "name": tool,
                                "args": [], "kwargs": request["inputs"]}))
                }
                None => Some(json!({"type": "result", "id": id, "ok": true,
                                    "value": request["inputs"],
                                    "stdout": "no tool offered\n", "stdout_truncated": false})),
            }
        }
        Some("tool_result") => pending.take().map(|(id, tool)| {
            if request["ok"] == json!(true) {
                json!({"type": "result", "id": id, "ok": true, "value": request["value"],
                       "stdout": format!("called {tool}\n"), "stdout_truncated": false})
            } else {
                json!({"type": "result", "id": id, "ok": false, "value": null,
                       "error": {"kind": "tool", "message": request["error"]},
                       "stdout": "", "stdout_truncated": false})
            }
        }),
        _ => None,
    }
}

pub(super) async fn converse(fake: Shared, pod: String, socket: WebSocket) {
    let mut pending: Pending = None;
    converse_lines(&fake, &pod, "bridge", socket, |request| {
        answer(&mut pending, request)
    })
    .await;
}
