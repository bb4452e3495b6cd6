//! Pause, connect and lifecycle of `dockhand serve`'s sandboxes through the
//! E2B SDKs (`e2b`, `e2b-code-interpreter`), against real containers on a
//! daemon without checkpoints: pauses keep files (memory mode is tested on
//! a daemon of its own in tests/persistence_memory.rs).

mod common;
#[path = "common/serve_server.rs"]
mod serve_server;

use std::time::Duration;

use serve_server::{json_output, owned, wait_until_none, Server, SERIAL};

#[test]
fn paused_sandboxes_keep_their_files_and_resume_through_the_sdks() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let server = Server::start(1);
    let r = json_output(server.python("persistence.py", &[]));

    let pause = &r["pause"];
    assert_eq!(pause["paused"], true);
    assert_eq!(pause["state_after_pause"], "paused");
    assert_eq!(pause["listed_paused"], true);
    assert_eq!(pause["listed_running"], false);
    assert_eq!(pause["paused_again"], false);
    assert!(pause["call_while_paused"].is_string(), "{pause}");
    assert_eq!(pause["other_connect"], "SandboxNotFoundException");
    assert!(pause["other_pause"].is_string(), "{pause}");
    assert_eq!(pause["state_after_connect"], "running");
    assert_eq!(pause["file_after"], "kept");
    assert_eq!(pause["tmp_after"], "from-shell\n");
    assert_eq!(pause["connect_running"], "kept");
    assert_eq!(pause["beta_paused"], true);
    assert_eq!(pause["connected_again"], "up\n");
    assert!(pause["killed_paused_gone"].is_string());
    assert!(pause["kill_paused"].is_string());
    let resume = pause["resume_seconds"].as_f64().unwrap();
    eprintln!("E2B connect() of a paused sandbox: {resume:.3} s");
    assert!(resume < 5.0, "{resume}");

    let lifecycle = &r["lifecycle"];
    assert_eq!(lifecycle["paused_at_timeout"], true);
    assert_eq!(lifecycle["auto_resumed_read"], "auto");
    assert_eq!(lifecycle["running_after_call"], "running");
    assert_eq!(lifecycle["fs_paused_at_timeout"], true);
    assert!(lifecycle["fs_call_refused"].is_string(), "{lifecycle}");
    assert_eq!(lifecycle["fs_connected_read"], "files");
    assert!(lifecycle["killed_at_timeout"].is_string());

    let interpreter = &r["interpreter"];
    assert!(interpreter["memory_refused"].is_string(), "{interpreter}");
    assert_eq!(interpreter["still_running"], "42");
    assert_eq!(interpreter["paused"], true);
    assert_eq!(interpreter["stdout"], serde_json::json!(["k\n"]));
    assert_eq!(interpreter["error"], "NameError");

    // Nothing left once the server ends (paused ones included).
    let pid = server.pid();
    drop(server);
    let left = wait_until_none(pid, Duration::from_secs(30));
    assert!(left.is_empty(), "left behind: {left:?}");
    // The watchdog goes last.
    let started = std::time::Instant::now();
    while !owned(pid, false).is_empty() && started.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(owned(pid, false), Vec::<String>::new());
}
