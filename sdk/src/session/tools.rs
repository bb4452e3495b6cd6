//! Agent tools bound to a session: definitions (name, description, JSON
//! Schema of the arguments) and a dispatcher, for any LLM framework.

use serde::Serialize;
use serde_json::{json, Value};

use super::api::{ExecOptions, SessionApi};
use super::edits::Edit;
use crate::codemode::check_schema;
use crate::error::{Error, Result};

/// A tool as an LLM framework wants it described.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolDefinition {
    /// Tool name.
    pub name: &'static str,
    /// What it does, for the model.
    pub description: &'static str,
    /// JSON Schema of its arguments.
    pub parameters: Value,
}

/// Every tool's name, in the order definitions list them.
pub const ALL_TOOLS: [&str; 5] = ["shell", "read_file", "write_file", "edit_file", "list_dir"];
/// The tools that cannot change anything.
pub const READ_ONLY_TOOLS: [&str; 2] = ["read_file", "list_dir"];

fn definition(name: &str) -> Option<ToolDefinition> {
    let (name, description, parameters) = match name {
        "shell" => (
            "shell",
            "Runs a shell command in the workspace and returns its exit code, stdout and stderr.",
            json!({"type": "object", "properties": {
                "command": {"type": "string", "description": "the command, run by /bin/sh -c"},
                "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": 86400, "description": "kill it after this many seconds"}
            }, "required": ["command"], "additionalProperties": false}),
        ),
        "read_file" => (
            "read_file",
            "Reads a file (path relative to the workspace).",
            json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"], "additionalProperties": false}),
        ),
        "write_file" => (
            "write_file",
            "Writes a whole file, creating parent directories (path relative to the workspace).",
            json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path", "content"], "additionalProperties": false}),
        ),
        "edit_file" => (
            "edit_file",
            "Edits a file; all edits apply or none. Each edit is one of: {old, new, all?} replace \
             (empty new removes the text, and its line if that empties it); {old, delete: true, all?} \
             delete; {old, insert: \"before\"|\"after\", content} or {insert: \"start\"|\"end\", content} \
             insert; {from, to, content} replace the block from the text `from` through the first \
             `to` after it (or lines, when they are numbers; empty content deletes). Anchors \
             tolerate trailing whitespace and different indentation; `all` takes exact matches \
             only and is a no-op when none match. Also accepted: {insert: text, before|after: \
             anchor} and {insert: text, at: \"start\"|\"end\"}.",
            json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "relative to the workspace"},
                "edits": {"type": "array", "minItems": 1, "items": {
                    "type": "object",
                    "properties": {
                        "old": {"type": "string", "description": "text to replace, delete or insert next to"},
                        "new": {"type": "string", "description": "replacement for old"},
                        "all": {"type": "boolean", "description": "every exact match of old"},
                        "delete": {"type": "boolean", "description": "delete old"},
                        "insert": {"type": "string", "description": "\"before\", \"after\", \"start\" or \"end\" (with content), or the text to insert (with before/after/at)"},
                        "content": {"type": "string", "description": "text to insert, or the block's replacement"},
                        "from": {"type": ["string", "integer"], "description": "where the block starts: text, or a 1-based line"},
                        "to": {"type": ["string", "integer"], "description": "where it ends, inclusive: text, or a 1-based line"},
                        "before": {"type": "string"},
                        "after": {"type": "string"},
                        "at": {"type": "string", "enum": ["start", "end"]}
                    },
                    "additionalProperties": false
                }}
            }, "required": ["path", "edits"], "additionalProperties": false}),
        ),
        "list_dir" => (
            "list_dir",
            "Lists a directory (path relative to the workspace; default the workspace).",
            json!({"type": "object", "properties": {"path": {"type": "string"}}, "additionalProperties": false}),
        ),
        _ => return None,
    };
    Some(ToolDefinition {
        name,
        description,
        parameters,
    })
}

/// Tools bound to one session. Several sessions can each have their own.
///
/// ```
/// use dockhand::session::SessionTools;
/// use dockhand::testing::FakeSession;
/// let tools = SessionTools::read_only(FakeSession::new());
/// let names: Vec<_> = tools.definitions().iter().map(|d| d.name).collect();
/// assert_eq!(names, ["read_file", "list_dir"]);
/// ```
#[derive(Debug, Clone)]
pub struct SessionTools<S> {
    session: S,
    enabled: Vec<&'static str>,
}

impl<S: SessionApi> SessionTools<S> {
    /// All tools: shell, read_file, write_file, edit_file, list_dir.
    pub fn new(session: S) -> Self {
        SessionTools {
            session,
            enabled: ALL_TOOLS.to_vec(),
        }
    }

    /// Only the tools that cannot change anything (read_file, list_dir).
    pub fn read_only(session: S) -> Self {
        SessionTools {
            session,
            enabled: READ_ONLY_TOOLS.to_vec(),
        }
    }

    /// Only the named tools (unknown names are ignored).
    pub fn only(mut self, names: &[&str]) -> Self {
        self.enabled.retain(|t| names.contains(t));
        self
    }

    /// The session the tools act on.
    pub fn session(&self) -> &S {
        &self.session
    }

    /// Definitions of the enabled tools.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.enabled.iter().filter_map(|n| definition(n)).collect()
    }

    /// Runs tool `name` with JSON arguments. Failures the model can act on
    /// (a missing file, an edit whose anchor is not found, bad arguments, a
    /// timeout) come back as `{"error": "..."}`; `Err` is kept for the session
    /// itself being unavailable.
    pub async fn call(&self, name: &str, args: Value) -> Result<Value> {
        let Some(def) = definition(name).filter(|_| self.enabled.contains(&name)) else {
            return Ok(
                json!({"error": format!("no tool named `{name}`; available: {}", self.enabled.join(", "))}),
            );
        };
        if let Err(why) = check_schema(&def.parameters, &args) {
            return Ok(json!({"error": format!("arguments {why}")}));
        }
        let text = |key: &str| args[key].as_str().unwrap_or_default().to_string();
        let outcome = match name {
            "shell" => {
                let mut options = ExecOptions::new();
                // The schema check made it a positive number of seconds.
                if let Some(t) = args["timeout"].as_f64() {
                    options = options.timeout(std::time::Duration::from_secs_f64(t));
                }
                self.session.exec_with(&text("command"), options).await.map(|r| {
                    json!({"exit_code": r.exit_code, "stdout": r.stdout, "stderr": r.stderr,
                           "stdout_truncated": r.stdout_truncated, "stderr_truncated": r.stderr_truncated})
                })
            }
            "read_file" => self.session.read_file(&text("path")).await.map(|bytes| match String::from_utf8(bytes) {
                Ok(content) => json!({"content": content}),
                Err(e) => json!({"content_base64": super::protocol::b64(e.as_bytes()), "note": "binary file"}),
            }),
            "write_file" => {
                let content = text("content");
                self.session.write_file(&text("path"), content.as_bytes()).await.map(|_| json!({"written_bytes": content.len()}))
            }
            "edit_file" => match serde_json::from_value::<Vec<Edit>>(args["edits"].clone()) {
                Err(e) => return Ok(json!({"error": format!("edits are not valid: {e}")})),
                Ok(edits) => self.session.edit_file(&text("path"), &edits).await.map(|r| {
                    // Line counts, not text: the model wrote the text and can re-read the file.
                    json!({"applied": r.applied, "changes": r.changes.iter().map(|c| json!({"line": c.line, "removed": c.removed_lines, "added": c.added_lines})).collect::<Vec<_>>()})
                }),
            },
            _ => {
                let path = args["path"].as_str().unwrap_or(".").to_string();
                self.session.list_dir(&path).await.map(|entries| json!({"entries": entries}))
            }
        };
        match outcome {
            Ok(v) => Ok(v),
            Err(e @ Error::SessionUnavailable { .. }) => Err(e),
            Err(Error::CommandTimeout {
                timeout,
                stdout,
                stderr,
            }) => Ok(json!({
                "error": format!("the command ran longer than {:.1}s and was killed", timeout.as_secs_f64()),
                "stdout": stdout, "stderr": stderr
            })),
            Err(e) => Ok(json!({"error": e.to_string()})),
        }
    }
}
