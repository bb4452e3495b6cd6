//! The bridge protocol between the host and the in-container bridge
//! (`sdk/images/codehost/bridge`): one JSON object per line, both ways.
//! Pure: framing and message types, tested without Docker.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// The bridge's settings, passed once as its command-line argument: Monty's
/// limits are fixed per checked-out interpreter, and the bridge checks one out
/// ahead of each execution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BridgeConfig {
    /// Wall-clock seconds for one execution (tool calls included).
    pub timeout_s: f64,
    /// Monty's heap limit for one execution, in bytes.
    pub memory_bytes: i64,
    /// Monty's call-depth limit.
    pub recursion_limit: u32,
    /// Iterations any single loop may run.
    pub loop_limit: u64,
    /// Characters of `print()` output kept.
    pub print_limit: usize,
    /// Bytes of JSON the final value may take.
    pub value_limit: usize,
    /// Bytes a suspended execution's saved state may take.
    pub suspend_limit: usize,
    /// Tool calls one execution may make.
    pub max_tool_calls: u64,
    /// REPL sessions open at once.
    pub max_sessions: u32,
    /// `"default"` or `"strict"` (see [`CodePolicy`](super::CodePolicy)).
    pub policy: &'static str,
    /// With the policy `"rules"`: the strict rules on.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<&'static str>,
    /// What `os.getenv` and `os.environ` see.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub env: std::collections::BTreeMap<String, String>,
    /// A fixed clock, in microseconds since the Unix epoch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock_unix_micros: Option<i64>,
    /// The seed `random` starts from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub random_seed: Option<u64>,
    /// Values come back in the exact (tagged) encoding.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub exact_values: bool,
    /// Directories the code's file calls reach (see `CodeHostConfig::mount`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<BridgeMount>,
    /// The host's Unix socket inside the container, when it offers one
    /// (local daemons), and the token the bridge greets it with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

/// One directory the bridge mounts: `path` in the container, seen by the
/// code at `virtual`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BridgeMount {
    #[serde(rename = "virtual")]
    pub virtual_path: String,
    pub path: String,
    pub mode: String,
}

/// Host -> bridge.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToRunner {
    /// Run code.
    Execute {
        /// Execution id, echoed in the result.
        id: String,
        /// The code.
        code: String,
        /// Variables defined before the code runs.
        inputs: Map<String, Value>,
        /// Names of the tools the code may call.
        tools: Vec<String>,
        /// REPL session whose namespace to use; `None` for a fresh interpreter.
        session: Option<String>,
        /// Stubs to type-check the code against; `None` skips type checking.
        #[serde(skip_serializing_if = "Option::is_none")]
        type_stubs: Option<String>,
        /// Tools whose calls stop the execution for approval.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        approval: Vec<String>,
        /// The modules the code may import tools and skills from.
        #[serde(flatten)]
        modules: ModuleOffer,
    },
    /// Goes on with a suspended execution, answering the call it stopped at.
    Resume {
        /// Execution id, echoed in the result.
        id: String,
        /// The code, as first executed.
        code: String,
        /// Names of the tools the code may call.
        tools: Vec<String>,
        /// Tools whose calls stop the execution for approval.
        approval: Vec<String>,
        /// The bridge's saved execution, with the output printed before.
        suspended: Value,
        /// The stopped call's outcome: `{"ok", "value" | "error"}`.
        reply: Value,
        /// The modules the code may import tools and skills from.
        #[serde(flatten)]
        modules: ModuleOffer,
    },
    /// Ends an execution the host no longer waits for.
    Cancel {
        /// The execution.
        id: String,
    },
    /// The answer to a tool call.
    ToolResult {
        /// The call's number.
        call: u64,
        /// Whether the tool succeeded.
        ok: bool,
        /// Its value, when it succeeded.
        #[serde(skip_serializing_if = "Option::is_none")]
        value: Option<Value>,
        /// Its error message, when it failed.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// Ends a REPL session.
    CloseSession {
        /// The session.
        session: String,
    },
    /// Asks for `ready` again: a host that attached after the bridge
    /// started (a pod on a cluster) missed the first one.
    #[cfg_attr(not(feature = "kubernetes"), allow(dead_code))]
    Hello,
    /// The mounted directories' copies are in place: open them. Sent once,
    /// after the start, since their in-memory volume keeps only what is
    /// uploaded while the container runs.
    OpenMounts,
}

/// The host's modules for one execution (see `modules` and `skills`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ModuleOffer {
    /// Module path -> name in the module -> the tool's name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub modules: BTreeMap<String, BTreeMap<String, String>>,
    /// Module path -> its stubs, for the type checker.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub module_stubs: BTreeMap<String, String>,
    /// The tools' stubs a skill is checked against when the code saves one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skill_stubs: Option<String>,
}

/// An error reported by the bridge.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct RunnerError {
    /// `validation`, `runtime`, `tool`, `timeout`, `memory`, `loop_limit`,
    /// `output_limit`, `value`, `tool_limit`, `session_limit`, `cancelled`, `crash`.
    pub kind: String,
    /// For validation errors: the rule broken.
    #[serde(default)]
    pub rule: Option<String>,
    /// For runtime errors: the exception class.
    #[serde(default, rename = "type")]
    pub exception_type: Option<String>,
    /// What happened.
    #[serde(default)]
    pub message: String,
    /// Line in the code (1-based; 0 when unknown).
    #[serde(default)]
    pub line: u32,
    /// Column (1-based; 0 when unknown).
    #[serde(default)]
    pub col: u32,
}

/// The outcome of one execution, as the bridge reports it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ExecResult {
    /// The execution id.
    pub id: String,
    /// Whether it succeeded.
    pub ok: bool,
    /// The value of the final expression.
    #[serde(default)]
    pub value: Value,
    /// What went wrong.
    #[serde(default)]
    pub error: Option<RunnerError>,
    /// Captured `print()` output.
    #[serde(default)]
    pub stdout: String,
    /// Whether it was cut at the limit.
    #[serde(default)]
    pub stdout_truncated: bool,
    /// The saved execution, when it stopped for approval.
    #[serde(default)]
    pub suspended: Option<Value>,
}

/// Bridge -> host.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromRunner {
    /// The bridge is up.
    Ready {
        /// Its process id inside the container.
        pid: u32,
    },
    /// The code called a tool and waits for its result.
    ToolCall {
        /// Call number (unique within the bridge).
        call: u64,
        /// The execution that made it (the caller's, or a skill's).
        #[serde(default)]
        execution: Option<String>,
        /// Tool name.
        name: String,
        /// Positional arguments.
        #[serde(default)]
        args: Vec<Value>,
        /// Keyword arguments.
        #[serde(default)]
        kwargs: Map<String, Value>,
    },
    /// An execution ended.
    Result(ExecResult),
    /// A session was closed.
    SessionClosed {
        /// The session.
        session: String,
    },
    /// The answer to [`ToRunner::OpenMounts`].
    MountsOpened {
        /// Why a mount could not be opened; `None` when all were.
        #[serde(default)]
        error: Option<String>,
    },
}

/// One message as a line of JSON.
pub fn encode(message: &ToRunner) -> Vec<u8> {
    let mut line = serde_json::to_vec(message).unwrap_or_default();
    line.push(b'\n');
    line
}

/// Parses one line from the bridge.
pub fn decode(line: &[u8]) -> Result<FromRunner, String> {
    serde_json::from_slice(line).map_err(|e| format!("{e}: {}", String::from_utf8_lossy(line)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::LineBuffer;
    use serde_json::json;

    #[test]
    fn messages_are_single_json_lines() {
        let line = encode(&ToRunner::ToolResult {
            call: 3,
            ok: true,
            value: Some(json!({"a": "x\ny"})),
            error: None,
        });
        assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
        assert!(line.ends_with(b"\n"));
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(
            v,
            json!({"type": "tool_result", "call": 3, "ok": true, "value": {"a": "x\ny"}})
        );
    }

    #[test]
    fn execute_names_its_fields_as_the_runner_expects() {
        let line = encode(&ToRunner::Execute {
            id: "e1".into(),
            code: "1".into(),
            inputs: Map::new(),
            tools: vec!["t".into()],
            session: None,
            type_stubs: None,
            approval: Vec::new(),
            modules: ModuleOffer {
                modules: BTreeMap::from([(
                    "tools".into(),
                    BTreeMap::from([("t".into(), "t".into())]),
                )]),
                ..ModuleOffer::default()
            },
        });
        let v: Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["type"], "execute");
        // Flattened beside the other fields, as the bridge reads them.
        assert_eq!(v["modules"]["tools"]["t"], "t");
        assert!(v.get("module_stubs").is_none() && v.get("skill_stubs").is_none());
        assert_eq!(v["tools"], serde_json::json!(["t"]));
        assert_eq!(v["session"], Value::Null);
        assert!(v.get("type_stubs").is_none());
        let cancel: Value =
            serde_json::from_slice(&encode(&ToRunner::Cancel { id: "e2".into() })).unwrap();
        assert_eq!(cancel, serde_json::json!({"type": "cancel", "id": "e2"}));
    }

    #[test]
    fn lines_split_across_chunks() {
        let mut b = LineBuffer::default();
        assert!(b.push(b"{\"type\":\"ready\",").is_empty());
        let lines = b.push(b"\"pid\":7}\n{\"type\":\"session_closed\",\"session\":\"s\"}\n{\"ty");
        assert_eq!(lines.len(), 2);
        assert_eq!(decode(&lines[0]).unwrap(), FromRunner::Ready { pid: 7 });
        assert_eq!(
            decode(&lines[1]).unwrap(),
            FromRunner::SessionClosed {
                session: "s".into()
            }
        );
        assert_eq!(b.push(b"pe\":\"ready\",\"pid\":1}\n").len(), 1);
    }

    #[test]
    fn results_and_tool_calls_decode() {
        let call =
            decode(br#"{"type":"tool_call","call":1,"name":"f","args":[1],"kwargs":{"k":2}}"#)
                .unwrap();
        assert!(matches!(call, FromRunner::ToolCall { call: 1, ref name, .. } if name == "f"));
        let res = decode(br#"{"type":"result","id":"e","ok":false,"error":{"kind":"validation","rule":"import","message":"m","line":2,"col":5},"stdout":"","stdout_truncated":false}"#).unwrap();
        let FromRunner::Result(r) = res else { panic!() };
        let e = r.error.unwrap();
        assert_eq!(
            (e.kind.as_str(), e.rule.as_deref(), e.line, e.col),
            ("validation", Some("import"), 2, 5)
        );
        assert!(decode(b"not json").is_err());
    }
}
