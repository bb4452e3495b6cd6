//! Code mode over an MCP server: the reference time server (`mcp-server-time`
//! from PyPI) becomes code-mode tools, with stubs from its JSON Schemas. One
//! program calls them many times (a gather fans out), and `convert_time`
//! needs approval: the program stops there, is kept as bytes, and goes on
//! once approved, with only its printed output and final value returned.
//!
//! ```text
//! cargo run --example codemode_mcp
//! ```
//!
//! The server runs on this machine: the example installs it into a venv in
//! dockhand's cache directory the first time (pip reaches PyPI then), or
//! uses the `python` named by `MCP_TIME_PYTHON`.

use std::path::PathBuf;

use dockhand::codemode::{CodeHostConfig, Decision, McpServer, SuspensionStore, Toolset};
use dockhand::Client;
use serde_json::json;

const PROGRAM: &str = r#"
cities = ["Asia/Tokyo", "Europe/Berlin", "America/New_York", "Australia/Sydney"]
now = await gather(*[get_current_time(timezone=c) for c in cities])
for c, t in zip(cities, now):
    print(f"{c:<20} {t['datetime'][11:16]}  dst={t['is_dst']}")
meeting = await convert_time(source_timezone="Europe/Berlin", time="16:00", target_timezone="Asia/Tokyo")
{"berlin_16h_in_tokyo": meeting["target"]["datetime"][11:16], "difference": meeting["time_difference"]}
"#;

/// A Python with `mcp-server-time`: `MCP_TIME_PYTHON`, or a venv made once.
fn time_server_python() -> Result<PathBuf, Box<dyn std::error::Error>> {
    if let Some(python) = std::env::var_os("MCP_TIME_PYTHON") {
        return Ok(python.into());
    }
    let cache = std::env::var_os(dockhand::CACHE_DIR_ENV)
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/dockhand")))
        .unwrap_or_else(std::env::temp_dir);
    let venv = cache.join("examples/mcp-server-time");
    let python = venv.join("bin/python");
    if !venv.join(".ready").exists() {
        eprintln!("installing mcp-server-time into {} ...", venv.display());
        let run = |cmd: &mut std::process::Command| -> Result<(), Box<dyn std::error::Error>> {
            let status = cmd.status()?;
            if !status.success() {
                return Err(format!("{cmd:?} failed ({status})").into());
            }
            Ok(())
        };
        run(std::process::Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv))?;
        run(std::process::Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "-q",
            "mcp-server-time==2026.10.19",
        ]))?;
        std::fs::write(venv.join(".ready"), b"")?;
    }
    Ok(python)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let python = time_server_python()?;
    let server = McpServer::stdio(
        "time",
        python.to_string_lossy(),
        ["-m", "mcp_server_time", "--local-timezone", "UTC"],
    )
    .requires_approval(["convert_time"]);
    let tools = server
        .connect()
        .await?
        .into_iter()
        .fold(Toolset::new(), Toolset::tool);
    println!("--- what the model is told ---\n{}", tools.prompt());

    let store = tempfile::tempdir()?;
    let client = Client::connect().await?;
    let host =
        client.code_host(CodeHostConfig::new().suspensions(SuspensionStore::at(store.path())));
    let run = host.execute(PROGRAM, json!({}), &tools).await?;
    print!("--- printed before the approval ---\n{}", run.stdout);
    let Some(stopped) = run.suspended else {
        return Err("convert_time should have needed approval".into());
    };
    println!("--- stopped: {}({}) ---", stopped.tool(), stopped.args());
    // Keep it anywhere (a database row, a queue); nothing is held meanwhile.
    let kept = stopped.to_bytes();
    println!("kept as {} bytes; approving", kept.len());
    let stopped = host.open_suspended(&kept).await?;
    let done = host.resume(&stopped, Decision::Approve, &tools).await?;
    println!("--- value ---\n{}", done.value);
    println!("tool calls after the approval: {}", done.tool_calls.len());
    host.close().await?;
    Ok(())
}
