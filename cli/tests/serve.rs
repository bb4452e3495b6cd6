//! `dockhand serve` driven by the E2B SDKs themselves (`e2b` and
//! `e2b-code-interpreter` from PyPI, pinned in `common/serve_server.rs`),
//! against real containers:
//! the SDKs' public calls sync and async, tenants, traversal attempts, a
//! burst of a hundred creates, and SIGKILL of the server.

mod common;
#[path = "common/serve_server.rs"]
mod serve_server;

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serve_server::{json_output, owned, owned_containers, wait_until_none, Server, SERIAL};

#[test]
fn the_e2b_sdks_work_unchanged_against_serve() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let server = Server::start(1);
    let r = json_output(server.python("sdk_calls.py", &[]));

    // The code interpreter: a chart with its data, a DataFrame, an error,
    // state across runs and contexts.
    assert_eq!(r["chart"]["type"], "line");
    assert_eq!(r["chart"]["title"], "Growth");
    assert_eq!(
        r["chart"]["points"],
        serde_json::json!([[1, 4], [2, 5], [3, 6]])
    );
    assert!(
        r["dataframe"].to_string().contains('a'),
        "{}",
        r["dataframe"]
    );
    assert_eq!(r["error_name"], "ZeroDivisionError");
    assert_eq!(r["streamed_stdout"], serde_json::json!(["set\n"]));
    assert_eq!(r["state"], "42");
    assert_eq!(r["context_value"], "'other'");
    assert_eq!(r["default_after_context"], "42");
    assert_eq!(r["contexts_listed"], true);
    assert_eq!(r["after_restart"], "NameError");
    assert_eq!(r["context_removed"], true);

    // Files.
    assert_eq!(r["written_path"], "/home/user/notes/a.txt");
    assert_eq!(r["text"], "hello");
    assert_eq!(r["bytes_round_trip"], true);
    assert_eq!(r["listed"], serde_json::json!(["1.txt", "2.txt"]));
    assert_eq!(r["exists"], serde_json::json!([true, false]));
    assert_eq!(r["make_dir"], serde_json::json!([true, false]));
    assert_eq!(r["renamed_size"], 3);
    assert_eq!(r["removed"], true);
    assert_eq!(r["missing_read"], "FileNotFoundException");
    assert_eq!(
        r["watch_events"],
        serde_json::json!([
            "new.txt CREATE",
            "new.txt REMOVE",
            "new.txt WRITE",
            "sub CREATE",
            "sub/deep.txt CREATE",
            "sub/deep.txt WRITE"
        ])
    );

    // Every way out of the sandbox's files is refused, and nothing landed.
    for (attempt, outcome) in r["traversal"].as_object().unwrap() {
        assert!(outcome.is_string(), "{attempt} was not refused: {outcome}");
    }
    assert_eq!(r["etc_untouched"], "0");

    // Commands.
    assert_eq!(r["run"]["stdout"], "hi\n");
    assert_eq!(r["run"]["stderr"], "err\n");
    assert_eq!(r["run"]["streamed"], "hi\n");
    assert_eq!(r["exit_3"], 3);
    assert_eq!(r["cwd"], "/home/user");
    assert_eq!(r["background_listed"], true);
    assert_eq!(r["killed"], true);
    assert_eq!(r["killed_wait"], -1);
    assert_eq!(r["killed_gone"], true);
    assert_eq!(r["stdin_echo"], "piped\n");
    assert_eq!(r["reconnected"], "later\n");
    assert_eq!(r["pty_exit"], 7);
    assert_eq!(
        r["pty"],
        serde_json::json!({"size": true, "tty": true, "terminal": true, "job_control_warning": false})
    );

    // Hostile code: a flood nobody reads, a fork bomb, a kill mid-command.
    assert_eq!(r["flood_killed"], true);
    assert_eq!(r["fork_bomb"], "CommandExitException");
    assert_eq!(r["after_bomb"], "alive\n");
    assert!(
        r["killed_mid_command"].is_string(),
        "the run outlived its sandbox"
    );
    assert_eq!(r["next_sandbox"], "fine\n");

    // E2B's error shapes and codes.
    let shapes = &r["shapes"];
    assert_eq!(shapes["bad_template"], serde_json::json!([400, 400, true]));
    assert_eq!(shapes["unknown"], serde_json::json!([404, 404]));
    assert_eq!(shapes["no_key"], serde_json::json!([401, 401]));
    assert!(shapes["oversized_sdk"].is_string());
    assert_eq!(shapes["oversized"], 413);
    assert_eq!(shapes["nothing_written"], true);
    assert_eq!(shapes["pause"], serde_json::json!([501, true, true]));

    // HTTP/2 without TLS, streams included.
    assert_eq!(r["h2c"]["version"], "HTTP/2");
    assert_eq!(r["h2c"]["list_status"], 200);
    assert_eq!(r["h2c"]["stdout"], "over-h2\n");
    assert_eq!(r["h2c"]["ended"], true);

    // The network: off by default, an allow-list through the gateway.
    assert_eq!(r["offline"], "refused");
    assert_eq!(
        r["fenced"],
        serde_json::json!({"listed": "resolves", "unlisted": "unknown", "direct": "refused"})
    );
    assert!(r["bad_network"].is_string());

    // Listing, killing, timeouts.
    assert_eq!(
        r["listed_ids"],
        serde_json::json!([r["sandbox_id"].clone()])
    );
    assert_eq!(r["running_after_kill"], false);
    assert_eq!(r["envs"], "hey\n");
    let lived = r["timeout_set"].as_i64().unwrap_or(0);
    assert!((3..=5).contains(&lived), "set_timeout(3) gave {lived} s");
    assert_eq!(r["alive_after_timeout"], false);
    assert_eq!(r["info_after_timeout"], "SandboxNotFoundException");
    assert!(r["command_after_timeout"].is_string());

    // Keys and tenants.
    assert_eq!(r["other_connect"], "SandboxNotFoundException");
    assert_eq!(r["other_info"], "SandboxNotFoundException");
    assert_eq!(r["other_kill"], false);
    assert_eq!(r["other_lists"], serde_json::json!([]));
    assert_eq!(r["forged_status"], serde_json::json!([404, 404, 404]));
    assert_eq!(r["still_running"], true);
    assert_eq!(r["wrong_key"], "AuthenticationException");
    assert!(r["bad_template"].is_string());

    // The async SDK.
    let a = &r["async"];
    assert_eq!(a["text"], "5");
    assert_eq!(a["stdout"], serde_json::json!(["a\n"]));
    assert_eq!(a["command"], "async\n");
    assert_eq!(a["file"], "written");
    assert_eq!(
        a["watch_events"],
        serde_json::json!(["x.txt CREATE", "x.txt WRITE"])
    );
    assert_eq!(a["killed"], true);
    assert_eq!(a["running_after_kill"], false);

    server.stop_leaving_nothing(Duration::from_secs(30));
}

/// A burst: a hundred creates at once through the SDK, each then used
/// (a command, a file written and read back) and killed. The pool holds
/// four; the rest start in turns, and every one succeeds.
#[test]
fn a_burst_of_a_hundred_creates_all_work_and_none_is_left() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let server = Server::start(4);
    let r = json_output(server.python("load.py", &["100", "100"]));
    assert_eq!(r["failed"], 0, "{r}");
    assert_eq!(r["done"], 100, "{r}");
    assert_eq!(r["listed_after"], 0, "{r}");
    eprintln!("load: {r}");
    let pid = server.pid();
    // Killed ones are gone while the server still runs; what remains is
    // the two templates' warm pools, `base`'s grown by the burst to twice
    // its size (`--pool-growth`).
    let warm = 2 * 4 + 4;
    let started = Instant::now();
    while owned_containers(pid).len() > warm && started.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        owned_containers(pid).len() <= warm,
        "killed sandboxes linger"
    );
    drop(server);
    assert_eq!(
        wait_until_none(pid, Duration::from_secs(30)),
        Vec::<String>::new()
    );
}

#[test]
fn sigkill_of_the_server_leaves_nothing() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let mut server = Server::start(1);
    let mut child = server
        .python("hold.py", &[])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python runs");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next().expect("a line").expect("readable");
    assert_eq!(line, "ready");
    let pid = server.pid();
    assert!(owned_containers(pid).len() >= 2, "two sandboxes run");
    server.child.kill().expect("SIGKILL");
    server.child.wait().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        wait_until_none(pid, Duration::from_secs(20)),
        Vec::<String>::new()
    );
    // The watchdog goes too, once it has removed the rest.
    let started = Instant::now();
    while !owned(pid, false).is_empty() && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(
        owned(pid, false),
        Vec::<String>::new(),
        "containers of the killed server remain"
    );
}

/// `run_code(language=...)` and contexts with a language through the real
/// `e2b-code-interpreter` SDK: a template of kind `kernel` with every
/// language (the image the SDK's kernel language tests build too).
#[test]
fn run_code_speaks_every_language_through_the_sdk() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("templates.json");
    std::fs::write(
        &file,
        r#"{"templates": {"polyglot": {"kind": "kernel", "pool": 0,
            "languages": ["javascript", "typescript", "bash", "r"]}}}"#,
    )
    .unwrap();
    let server = Server::start_with(0, &["--templates", file.to_str().unwrap()]);
    let r = json_output(server.python("languages.py", &[]));

    assert_eq!(r["js"]["text"], "42", "{}", r["js"]);
    assert_eq!(r["typescript"]["text"], "42", "{}", r["typescript"]);
    assert_eq!(r["bash"]["stdout"], "42\n", "{}", r["bash"]);
    // IRkernel shows values as display data: a result, not the main one.
    assert_eq!(r["r"]["results"][0], "[1] 42", "{}", r["r"]);

    let js_error = &r["js_error"]["error"];
    assert_eq!(js_error["name"], "RangeError", "{js_error}");
    assert!(js_error["value"].as_str().unwrap().contains("too far"));
    let r_error = &r["r_error"]["error"];
    assert!(
        r_error["value"].as_str().unwrap().contains("too far"),
        "{r_error}"
    );
    assert_eq!(r["bash_env"]["stdout"], "it's here\n", "{}", r["bash_env"]);
    assert_eq!(r["python_still"]["text"], "42");

    assert_eq!(r["context_language"], "r");
    assert_eq!(r["r_context"]["results"][0], "[1] 42", "{}", r["r_context"]);
    assert_eq!(
        r["r_default_after"]["results"][0], "[1] FALSE",
        "{}",
        r["r_default_after"]
    );
    let listed: Vec<&str> = r["listed"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|l| l.as_str())
        .collect();
    for language in ["bash", "javascript", "python", "r", "typescript"] {
        assert!(listed.contains(&language), "{listed:?}");
    }
    let cobol = r["cobol"].as_str().unwrap();
    assert!(
        cobol.contains("cobol") && !cobol.contains("accepted"),
        "{cobol}"
    );
    let plain_r = r["plain_r"].as_str().unwrap();
    assert!(plain_r.contains("--languages"), "{plain_r}");
    let pid = server.pid();
    drop(server);
    let left = wait_until_none(pid, Duration::from_secs(60));
    assert!(left.is_empty(), "left behind: {left:?}");
}
