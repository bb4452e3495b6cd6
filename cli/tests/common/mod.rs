//! Helpers shared by the `dockhand` command's test binaries.
// Each test binary uses some of these.
#![allow(dead_code)]

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt};
use serde_json::Value;

#[path = "../../../tests/common/docker_cli.rs"]
mod docker_cli;
#[path = "../../../tests/common/venv.rs"]
mod venv;
#[allow(unused_imports)] // each test binary uses some helpers
pub use docker_cli::{containers_with_label, docker};
#[allow(unused_imports)] // each test binary uses some helpers
pub use venv::venv_python;

/// The `dockhand` binary, with a deadline that only catches hangs.
pub fn dockhand() -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("dockhand").expect("the dockhand binary");
    cmd.timeout(Duration::from_secs(900));
    cmd
}

/// Starts a detached session with `dockhand session start`; returns its id.
pub fn start_session() -> String {
    let out = dockhand()
        .args(["session", "start"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8_lossy(&out).trim().to_string()
}

/// An MCP client of `dockhand mcp`.
pub type Client = RunningService<RoleClient, ()>;

/// Starts `dockhand mcp` and initializes a client of it over stdio.
pub async fn mcp_client() -> Client {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_dockhand"));
    command.arg("mcp");
    mcp_client_of(command).await
}

/// Initializes a client of `command` (a `dockhand mcp` with options) over stdio.
pub async fn mcp_client_of(command: tokio::process::Command) -> Client {
    let transport = TokioChildProcess::new(command).expect("start dockhand mcp");
    ().serve(transport).await.expect("initialize")
}

/// Calls `tool`; `Err` is a protocol error (arguments refused outright).
pub async fn try_call(
    client: &Client,
    tool: &'static str,
    args: Value,
) -> Result<CallToolResult, String> {
    let Value::Object(args) = args else {
        panic!("arguments are an object")
    };
    client
        .call_tool(CallToolRequestParams::new(tool).with_arguments(args))
        .await
        .map_err(|e| e.to_string())
}

/// Calls `tool`, which must answer (a tool error is an answer).
pub async fn call(client: &Client, tool: &'static str, args: Value) -> CallToolResult {
    try_call(client, tool, args)
        .await
        .unwrap_or_else(|e| panic!("calling {tool}: {e}"))
}

/// The tool's text content, parsed as JSON when it is JSON.
pub fn body(result: &CallToolResult) -> Value {
    let text = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<String>();
    serde_json::from_str(&text).unwrap_or(Value::String(text))
}

/// Whether the tool answered with an error.
pub fn failed(result: &CallToolResult) -> bool {
    result.is_error == Some(true)
}
