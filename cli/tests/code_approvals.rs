//! Approvals, suspensions by id, MCP servers from a config file, tool
//! modules and skills, through `dockhand code` and `dockhand mcp`'s
//! `execute`, `resume`, `list_modules` and `read_module`, driven as users
//! drive them (the command line; rmcp's client). The MCP server in the
//! config is the reference `mcp-server-time` from PyPI.

use std::path::{Path, PathBuf};

mod common;

use common::{body, call, dockhand, failed};
use serde_json::{json, Value};

/// A venv with the reference time server, made once per target directory
/// (the SDK's tests share it).
fn time_server_python() -> PathBuf {
    // Tests run on threads: one makes the venv, the others wait for it.
    static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("venv-mcp-server-time==2026.10.19");
    let python = dir.join("bin/python");
    if !dir.join(".ready").exists() {
        let ok = |cmd: &mut std::process::Command| {
            assert!(cmd.status().expect("python3 runs").success(), "{cmd:?}");
        };
        ok(std::process::Command::new("python3")
            .args(["-m", "venv"])
            .arg(&dir));
        ok(std::process::Command::new(&python).args([
            "-m",
            "pip",
            "install",
            "-q",
            "mcp-server-time==2026.10.19",
        ]));
        std::fs::write(dir.join(".ready"), b"").unwrap();
    }
    python
}

/// An `mcpServers` file naming the time server, `convert_time` needing approval.
fn mcp_config(dir: &Path) -> PathBuf {
    let config = json!({"mcpServers": {"time": {
        "command": time_server_python(),
        "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
        "requiresApproval": ["convert_time"],
    }}});
    let path = dir.join("servers.json");
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

/// `dockhand mcp` with the time server configured, and `variable` naming
/// `dir/sub` (its suspensions' or skills' directory).
async fn code_mode_server(dir: &Path, variable: &str, sub: &str) -> common::Client {
    let config = mcp_config(dir);
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_dockhand"));
    command
        .env(variable, dir.join(sub))
        .arg("mcp")
        .arg("--mcp-config")
        .arg(&config);
    common::mcp_client_of(command).await
}

/// The JSON a command that must succeed printed.
fn succeeded(command: &mut assert_cmd::Command) -> Value {
    json_of(&command.assert().success().get_output().stdout)
}

fn json_of(output: &[u8]) -> Value {
    serde_json::from_slice(output)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(output)))
}

#[test]
fn dockhand_code_stops_for_approval_and_resumes_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let program = dir.path().join("plan.py");
    std::fs::write(
        &program,
        "print('before')\nnow = await get_current_time(timezone='UTC')\n\
         r = await convert_time(source_timezone='Asia/Tokyo', time='12:00', target_timezone='Asia/Kolkata')\n\
         print('after')\n{'tz': now['timezone'], 'at': r['target']['datetime'][11:16]}",
    )
    .unwrap();
    let config = mcp_config(dir.path());
    let out = dockhand()
        .env("DOCKHAND_SUSPENSION_DIR", &store)
        .args(["--json", "code"])
        .arg(&program)
        .arg("--mcp-config")
        .arg(&config)
        .assert()
        .code(3)
        .get_output()
        .stdout
        .clone();
    let stopped = json_of(&out);
    assert_eq!(stopped["stdout"], "before\n");
    assert_eq!(stopped["suspended"]["tool"], "convert_time");
    assert_eq!(stopped["suspended"]["args"]["time"], "12:00");
    let id = stopped["suspended"]["id"].as_str().unwrap().to_string();

    // Another process goes on with it, as the user decided.
    let done = succeeded(
        dockhand()
            .env("DOCKHAND_SUSPENSION_DIR", &store)
            .args([
                "--json",
                "code",
                "--resume",
                &id,
                "--approve",
                "--mcp-config",
            ])
            .arg(&config),
    );
    assert_eq!(done["value"], json!({"tz": "UTC", "at": "08:30"}));
    assert_eq!(done["stdout"], "before\nafter\n");

    // Once only.
    dockhand()
        .env("DOCKHAND_SUSPENSION_DIR", &store)
        .args(["code", "--resume", &id, "--approve", "--mcp-config"])
        .arg(&config)
        .assert()
        .code(2)
        .stderr(predicates::str::contains("no suspension"));
}

#[test]
fn dockhand_code_rejections_reach_the_code() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let program = dir.path().join("plan.py");
    std::fs::write(
        &program,
        "try:\n    out = python(code='print(1)')\nexcept ToolError as e:\n    out = 'no: ' + str(e)\nout",
    )
    .unwrap();
    let out = dockhand()
        .env("DOCKHAND_SUSPENSION_DIR", &store)
        .args(["--json", "code", "--require-approval", "python"])
        .arg(&program)
        .assert()
        .code(3)
        .get_output()
        .stdout
        .clone();
    let id = json_of(&out)["suspended"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    dockhand()
        .env("DOCKHAND_SUSPENSION_DIR", &store)
        .args([
            "code",
            "--resume",
            &id,
            "--reject",
            "too costly",
            "--require-approval",
            "python",
        ])
        .assert()
        .success()
        .stdout(predicates::str::contains(
            "no: python() was not approved: too costly",
        ));
    dockhand()
        .args(["code", "--resume", "../key", "--approve"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("not a suspension id"));
    dockhand()
        .args(["code", "--require-approval", "nosuch"])
        .arg(&program)
        .assert()
        .code(2)
        .stderr(predicates::str::contains("no such tool"));
}

#[tokio::test]
async fn the_mcp_server_executes_with_configured_servers_and_resumes_approved_calls() {
    let dir = tempfile::tempdir().unwrap();
    let client = code_mode_server(dir.path(), "DOCKHAND_SUSPENSION_DIR", "store").await;
    let ran = call(
        &client,
        "execute",
        json!({"code": "now = await get_current_time(timezone='UTC')\nnow['timezone']"}),
    )
    .await;
    assert!(!failed(&ran), "{ran:?}");
    assert_eq!(body(&ran)["value"], "UTC");

    let stopped = call(
        &client,
        "execute",
        json!({"code": "r = await convert_time(source_timezone='UTC', time='00:00', target_timezone='Asia/Tokyo')\nr['target']['datetime'][11:16]"}),
    )
    .await;
    let suspended = &body(&stopped)["suspended"];
    assert_eq!(suspended["tool"], "convert_time", "{stopped:?}");
    let id = suspended["id"].as_str().unwrap().to_string();
    let done = call(&client, "resume", json!({"id": id, "decision": "approve"})).await;
    assert!(!failed(&done), "{done:?}");
    assert_eq!(body(&done)["value"], "09:00");
    let again = call(&client, "resume", json!({"id": id, "decision": "approve"})).await;
    assert!(failed(&again), "{again:?}");

    // A rejection's reason and an answer's value reach the code.
    let code = "try:\n    r = await convert_time(source_timezone='UTC', time='01:00', target_timezone='UTC')\nexcept ToolError as e:\n    r = str(e)\nr";
    for (decision, expected) in [
        (
            json!({"decision": "reject", "reason": "ask later"}),
            json!("convert_time() was not approved: ask later"),
        ),
        (
            json!({"decision": "answer", "value": {"given": 1}}),
            json!({"given": 1}),
        ),
    ] {
        let stopped = call(&client, "execute", json!({"code": code})).await;
        let mut args = decision;
        args["id"] = body(&stopped)["suspended"]["id"].clone();
        let done = call(&client, "resume", args).await;
        assert_eq!(body(&done)["value"], expected, "{done:?}");
    }
    client.cancel().await.unwrap();
}

#[test]
fn skills_one_dockhand_code_saves_are_imported_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let config = mcp_config(dir.path());
    let skills = dir.path().join("skills");
    let code = |program: &str| {
        let path = dir.path().join("program.py");
        std::fs::write(&path, program).unwrap();
        succeeded(
            dockhand()
                .env("DOCKHAND_SKILLS", &skills)
                .args(["--json", "code"])
                .arg(&path)
                .arg("--mcp-config")
                .arg(&config),
        )
    };
    let modules = |args: &[&str]| {
        succeeded(
            dockhand()
                .env("DOCKHAND_SKILLS", &skills)
                .args(["--json", "code", "--mcp-config"])
                .arg(&config)
                .args(args),
        )
    };
    let listed = modules(&["--list-modules"]);
    let paths: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, ["tools", "tools.time"], "{listed}");
    let time = modules(&["--read-module", "tools.time"]);
    assert!(
        time["source"]
            .as_str()
            .unwrap()
            .contains("def get_current_time(timezone: str)"),
        "{time}"
    );

    let saved = code(
        "async def utc_zone() -> str:\n    \"\"\"The zone the time server calls UTC.\"\"\"\n    \
         now = await get_current_time(timezone='UTC')\n    return now['timezone']\n\
         save_skill(utc_zone)",
    );
    assert_eq!(saved["value"], json!({"name": "utc_zone", "version": 1}));
    // Another process imports it.
    let used = code("from skills import utc_zone\nz = await utc_zone()\nz");
    assert_eq!(used["value"], "UTC");
    let listed = modules(&["--list-modules"]);
    assert_eq!(listed[2]["path"], "skills", "{listed}");
    assert_eq!(listed[2]["tools"], json!(["utc_zone"]));
    let read = modules(&["--read-module", "skills"]);
    assert!(
        read["source"]
            .as_str()
            .unwrap()
            .contains("The zone the time server calls UTC."),
        "{read}"
    );
    dockhand()
        .args(["code", "--read-module", "tools.nothing"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains(
            "there is no module `tools.nothing`",
        ));
}

#[tokio::test]
async fn the_mcp_server_lists_and_reads_modules() {
    let dir = tempfile::tempdir().unwrap();
    let client = code_mode_server(dir.path(), "DOCKHAND_SKILLS", "skills").await;
    let listed = call(&client, "list_modules", json!({})).await;
    assert!(!failed(&listed), "{listed:?}");
    let paths: Vec<String> = body(&listed)
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(paths, ["tools", "tools.time"]);
    let read = call(&client, "read_module", json!({"path": "tools.time"})).await;
    assert!(!failed(&read), "{read:?}");
    let text = format!("{:?}", read.content);
    assert!(text.contains("def convert_time("), "{text}");
    let missing = call(&client, "read_module", json!({"path": "nope"})).await;
    assert!(failed(&missing));
    // What execute's code imports is what read_module described.
    let ran = call(
        &client,
        "execute",
        json!({"code": "from tools.time import get_current_time as now\nr = await now(timezone='UTC')\nr['timezone']"}),
    )
    .await;
    assert_eq!(body(&ran)["value"], "UTC", "{ran:?}");
    client.cancel().await.unwrap();
}
