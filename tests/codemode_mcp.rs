//! MCP servers as code-mode tools, with rmcp as the client: the reference
//! `mcp-server-time` from PyPI (no one here wrote it; it reaches nothing but
//! this machine's clock and time-zone data), and a server that hangs, dies
//! or floods on request (`tests/mcp/hostile_server.py`, on the `mcp`
//! package's FastMCP).

mod common;

use common::{code_error, code_host as host_with};

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use dockhand::codemode::{
    CodeError, CodeHostConfig, Decision, McpServer, ParamType, SuspensionStore, Tool, Toolset,
};
use serde_json::json;

/// The venv with the reference time server (and the `mcp` package it
/// stands on), made once per target directory.
fn python() -> &'static PathBuf {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| common::venv_python(&["mcp-server-time==2026.10.19"]))
}

fn time_server() -> McpServer {
    McpServer::stdio(
        "time",
        python().to_string_lossy(),
        ["-m", "mcp_server_time", "--local-timezone", "UTC"],
    )
}

/// The hostile server; `tag` (an argument it ignores) tells its process
/// apart from other tests' servers.
fn hostile_server(tag: &str) -> McpServer {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/hostile_server.py");
    McpServer::stdio("hostile", python().to_string_lossy(), [script, tag])
        .call_timeout(Duration::from_secs(2))
        .max_result_bytes(1 << 20)
}

fn toolset(tools: Vec<Tool>) -> Toolset {
    tools.into_iter().fold(
        Toolset::new().tool(
            Tool::new("double", "Doubles x.")
                .param("x", ParamType::Int, "")
                .handler(|a| async move { Ok(json!(a["x"].as_i64().unwrap_or(0) * 2)) }),
        ),
        Toolset::tool,
    )
}

/// How many processes run `needle` in their command line.
fn processes_running(needle: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|c| String::from_utf8_lossy(c).contains(needle))
        .count()
}

#[tokio::test]
async fn a_reference_mcp_server_becomes_code_mode_tools() {
    let tools = toolset(time_server().connect().await.unwrap());
    let prompt = tools.prompt();
    assert!(
        prompt.contains("def convert_time(source_timezone: str, time: str, target_timezone: str)"),
        "{prompt}"
    );
    assert!(
        prompt.contains("def get_current_time(timezone: str)"),
        "{prompt}"
    );

    let host = host_with(CodeHostConfig::new()).await;
    // Time zones without daylight saving, so the answer is the same all year.
    let code = r#"
r = await convert_time(source_timezone="Asia/Tokyo", time="12:00", target_timezone="Asia/Kolkata")
now = await get_current_time(timezone="UTC")
hours = await gather(*[convert_time(source_timezone="UTC", time=f"{h:02d}:00", target_timezone="Asia/Tokyo") for h in range(3)])
print("converted")
{"target": r["target"]["datetime"][11:16], "tz": now["timezone"],
 "hours": [h["target"]["datetime"][11:16] for h in hours], "doubled": double(21)}
"#;
    let run = host.execute(code, json!({}), &tools).await.unwrap();
    assert_eq!(
        run.value,
        json!({"target": "08:30", "tz": "UTC", "hours": ["09:00", "10:00", "11:00"], "doubled": 42})
    );
    assert_eq!(run.stdout, "converted\n");
    assert_eq!(run.tool_calls.len(), 6);

    // The server's own errors are the code's ToolError.
    let run = host
        .execute(
            "try:\n    await get_current_time(timezone='Mars/Olympus')\nexcept ToolError as e:\n    r = str(e)\nr",
            json!({}),
            &tools,
        )
        .await
        .unwrap();
    assert!(
        run.value.as_str().unwrap().contains("Mars/Olympus"),
        "{}",
        run.value
    );
    host.close().await.unwrap();
}

#[tokio::test]
async fn mcp_tools_are_type_checked_and_their_arguments_checked_before_any_call() {
    let tools = toolset(time_server().connect().await.unwrap());
    let checked = host_with(CodeHostConfig::new().type_check(true)).await;
    let err = code_error(
        checked
            .execute(
                "a = await double(2)\nr = await get_current_time(timezone=7)\nr",
                json!({}),
                &tools,
            )
            .await,
    );
    assert!(
        matches!(&err, CodeError::Validation { rule, line: 2, .. } if rule == "type"),
        "{err:?}"
    );
    checked.close().await.unwrap();

    // Unchecked, the schema still stops the call before it reaches the server.
    let host = host_with(CodeHostConfig::new()).await;
    let err = code_error(
        host.execute("await get_current_time(timezone=7)", json!({}), &tools)
            .await,
    );
    assert!(
        matches!(&err, CodeError::Tool { message, .. } if message.contains("timezone")),
        "{err:?}"
    );
    host.close().await.unwrap();
}

/// What `call` raised as the code caught it (`caught: <message>`), or its value.
async fn caught(host: &dockhand::codemode::CodeHost, tools: &Toolset, call: &str) -> String {
    let code = format!(
        "try:\n    r = await {call}\nexcept ToolError as e:\n    r = 'caught: ' + str(e)\nr"
    );
    let run = host.execute(&code, json!({}), tools).await.unwrap();
    run.value.as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn servers_that_hang_die_or_flood_give_tool_errors_and_nothing_is_left() {
    let tools = toolset(hostile_server("tag-faults").connect().await.unwrap());
    assert_eq!(processes_running("tag-faults"), 1);
    let host = host_with(CodeHostConfig::new()).await;
    let started = Instant::now();
    let text = caught(&host, &tools, "hang(seconds=30)").await;
    assert!(text.contains("did not answer hang() within 2s"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );

    let text = caught(&host, &tools, "flood(megabytes=10)").await;
    assert!(text.contains("the limit is 1048576"), "{text}");
    assert!(text.len() < 300, "the flood does not reach the code");

    // Arguments that do not match the schema never reach the server.
    let text = caught(&host, &tools, "echo(text=5)").await;
    assert!(text.contains("argument `text`"), "{text}");

    // The server dies; this call and the next are the code's ToolError.
    for call in ["crash()", "echo(text='x')"] {
        let text = caught(&host, &tools, call).await;
        assert!(text.starts_with("caught: "), "{call}: {text}");
    }

    // The host is unaffected.
    let run = host.execute("double(4)", json!({}), &tools).await.unwrap();
    assert_eq!(run.value, json!(8));
    host.close().await.unwrap();

    // A live server goes with its tools.
    let live = toolset(hostile_server("tag-faults").connect().await.unwrap());
    assert_eq!(processes_running("tag-faults"), 1);
    drop(live);
    drop(tools);
    let deadline = Instant::now() + Duration::from_secs(10);
    while processes_running("tag-faults") > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(processes_running("tag-faults"), 0);
}

#[tokio::test]
async fn mcp_tools_can_need_approval() {
    let store = tempfile::tempdir().unwrap();
    let server = hostile_server("tag-approval").requires_approval(["echo"]);
    let tools = toolset(server.connect().await.unwrap());
    let host =
        host_with(CodeHostConfig::new().suspensions(SuspensionStore::at(store.path()))).await;
    let run = host
        .execute(
            "r = await echo(text='ab', times=2)\nr + '!'",
            json!({}),
            &tools,
        )
        .await
        .unwrap();
    let stopped = run.suspended.expect("echo needs approval");
    assert_eq!(stopped.tool(), "echo");
    assert_eq!(stopped.args(), &json!({"text": "ab", "times": 2}));
    let done = host
        .resume(&stopped, Decision::Approve, &tools)
        .await
        .unwrap();
    assert_eq!(done.value, json!("abab!"));
    host.close().await.unwrap();
}

#[tokio::test]
async fn a_server_that_cannot_start_is_a_typed_error() {
    let err = McpServer::stdio("missing", "/nonexistent/mcp-server", Vec::<String>::new())
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, dockhand::Error::McpServer { .. }), "{err}");
    assert!(err.to_string().contains("could not be started"), "{err}");
    // A program that is not an MCP server: it never initializes.
    let err = McpServer::stdio("silent", "sleep", ["30"])
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("`silent`"), "{err}");
    let err = McpServer::http("nowhere", "http://127.0.0.1:9/mcp")
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, dockhand::Error::McpServer { .. }), "{err}");
}

#[tokio::test]
async fn a_native_tool_result_over_the_limit_is_a_tool_error() {
    let tools = Toolset::new().tool(
        Tool::new("blob", "Returns n MiB of text.")
            .param("n", ParamType::Int, "")
            .handler(|a| async move {
                let n = a["n"].as_u64().unwrap_or(0) as usize;
                Ok(json!("x".repeat(n << 20)))
            }),
    );
    let host = host_with(CodeHostConfig::new().tool_result_limit(1 << 20)).await;
    let text = caught(&host, &tools, "blob(n=3)").await;
    assert!(text.contains("the limit is 1048576"), "{text}");
    let run = host
        .execute("len(await blob(n=0)) + 1", json!({}), &tools)
        .await
        .unwrap();
    assert_eq!(run.value, json!(1));
    host.close().await.unwrap();
}

#[tokio::test]
async fn a_streamable_http_server_becomes_tools_too() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/hostile_server.py");
    let mut server = tokio::process::Command::new(python())
        .args([script, "--http", &port.to_string()])
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let deadline = Instant::now() + Duration::from_secs(30);
    let tools = loop {
        match McpServer::http("web", &url)
            .prefix("web")
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
        {
            Ok(tools) => break toolset(tools),
            Err(e) if Instant::now() > deadline => panic!("{e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    assert!(tools.get("web_echo").is_some(), "{:?}", tools.names());
    let host = host_with(CodeHostConfig::new()).await;
    let run = host
        .execute("await web_echo(text='hi', times=3)", json!({}), &tools)
        .await
        .unwrap();
    assert_eq!(run.value, json!("hihihi"));
    host.close().await.unwrap();
    server.kill().await.unwrap();
}
