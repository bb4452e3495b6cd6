//! Pause, connect and lifecycle of `dockhand serve`'s sandboxes through the
//! E2B SDKs (`e2b`, `e2b-code-interpreter`), against real containers: on
//! the main daemon, without checkpoints, pauses keep files; on a second
//! dockerd of the test's own with gVisor and `experimental`, they keep
//! memory, and so do snapshots.

mod common;
#[path = "../../tests/common/second_daemon.rs"]
mod second_daemon;
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

    let snapshots = &r["snapshots"];
    assert_eq!(snapshots["source_runs_on"], "on\n");
    assert_eq!(snapshots["copy_file"], "from the snapshot");
    assert_eq!(snapshots["source_file"], "changed after");
    assert_eq!(snapshots["listed"], true);
    assert!(snapshots["other_cannot_use"].is_string(), "{snapshots}");
    assert_eq!(snapshots["named"], serde_json::json!(["my-snap"]));
    assert_eq!(snapshots["by_name"], "changed after");
    assert!(snapshots["name_taken"].is_string(), "{snapshots}");
    assert_eq!(snapshots["after_source_killed"], "from the snapshot");
    assert_eq!(snapshots["deleted"], true);
    assert_eq!(snapshots["deleted_again"], false);
    assert!(snapshots["create_after_delete"].is_string(), "{snapshots}");
    assert_eq!(snapshots["kernel_copy"], "2");

    let volumes = &r["volumes"];
    assert_eq!(volumes["created_name"], "shared-data");
    assert_eq!(volumes["read_back"], "hello\n");
    assert_eq!(volumes["listed"], true);
    assert_eq!(volumes["info_name"], "shared-data");
    assert_eq!(volumes["other_sees"], false);
    assert!(volumes["other_mount"].is_string(), "{volumes}");
    assert_eq!(volumes["other_destroy"], false);
    assert_eq!(volumes["content_read"], "hello\n");
    assert_eq!(volumes["content_written"], 12);
    assert!(volumes["content_overwrite"].is_string(), "{volumes}");
    assert_eq!(volumes["seen_in_sandbox"], "again");
    assert_eq!(
        volumes["listing"],
        serde_json::json!(["/docs", "/docs/deep", "/docs/deep/note.txt", "/h.txt"])
    );
    assert_eq!(volumes["exists"], serde_json::json!([true, false]));
    assert_eq!(volumes["mode"], "0o600");
    assert_eq!(volumes["info_type"], "directory");
    assert_eq!(volumes["removed"], false);
    assert!(volumes["missing_read"].is_string(), "{volumes}");
    assert!(volumes["climb"].is_string(), "{volumes}");
    assert!(volumes["foreign_owner"].is_string(), "{volumes}");
    assert!(volumes["forged_token"].is_string(), "{volumes}");
    assert!(volumes["their_token"].is_string(), "{volumes}");
    assert!(volumes["made_twice"].is_string(), "{volumes}");
    assert!(volumes["destroy_mounted"].is_string(), "{volumes}");
    assert_eq!(volumes["destroyed"], true);
    assert!(volumes["gone"].is_string(), "{volumes}");

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

/// The lines a docker CLI command prints.
fn docker_lines(args: &[&str]) -> Vec<String> {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .expect("docker CLI");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn kept_containers() -> Vec<String> {
    docker_lines(&["ps", "-aq", "--filter", "label=dev.dockhand.kept=true"])
}

#[test]
fn a_restarted_server_adopts_its_sandboxes_from_its_state_dir() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let state_arg = state.display().to_string();
    let before_kept = kept_containers().len();

    let first = Server::start_with(1, &["--state-dir", &state_arg]);
    let ids = json_output(first.python("restart.py", &["before"]));
    // SIGTERM: with a state directory the sandboxes are kept.
    drop(first);
    assert!(
        kept_containers().len() >= before_kept + 4,
        "the sandboxes' containers outlived the server"
    );

    let second = Server::start_with(1, &["--state-dir", &state_arg]);
    let r = json_output(second.python("restart.py", &["after", &ids.to_string()]));
    assert_eq!(
        r["listed"],
        serde_json::json!({"running": "running", "paused": "paused", "kernel": "running", "other": null})
    );
    assert_eq!(r["running_file"], "before the restart");
    assert_eq!(r["running_command"], "alive\n");
    assert_eq!(r["sleeper_alive"], "yes\n");
    assert_eq!(r["paused_file"], "paused before");
    assert_eq!(r["kernel"], serde_json::json!([["kernel file\n"], "4"]));
    assert_eq!(r["kernel_variable"], "42");
    assert_eq!(r["other_hidden"], "SandboxNotFoundException");
    assert_eq!(r["other_own"], "mine\n");
    drop(second);
    // Killed ones and the warm pools' are gone; nothing kept is left.
    let started = std::time::Instant::now();
    while kept_containers().len() > before_kept {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "kept containers left behind: {:?}",
            kept_containers()
        );
        std::thread::sleep(Duration::from_millis(250));
    }

    // A database that cannot be read, or one that went missing, stops the
    // server with the path; it never starts empty.
    let start = |dir: &std::path::Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_dockhand"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--pool",
                "0",
                "--state-dir",
            ])
            .arg(dir)
            .env("DOCKHAND_SERVE_API_KEYS", serve_server::KEY)
            .output()
            .unwrap()
    };
    let db = state.join("serve.db");
    std::fs::write(
        &db,
        b"this is not an SQLite database at all, not even close",
    )
    .unwrap();
    for f in ["serve.db-wal", "serve.db-shm"] {
        let _ = std::fs::remove_file(state.join(f));
    }
    let corrupt = start(&state);
    let said = String::from_utf8_lossy(&corrupt.stderr);
    assert!(
        !corrupt.status.success() && said.contains(&db.display().to_string()),
        "{said}"
    );
    std::fs::remove_file(&db).unwrap();
    std::fs::write(state.join("other-file"), b"x").unwrap();
    let missing = start(&state);
    let said = String::from_utf8_lossy(&missing.stderr);
    assert!(
        !missing.status.success() && said.contains("serve.db"),
        "{said}"
    );
}

/// The images built from specs (templates' included).
fn spec_images() -> Vec<String> {
    docker_lines(&["images", "-q", "--no-trunc", "dockhand/image"])
}

#[test]
fn templates_built_through_the_sdk_start_sandboxes_and_outlive_a_restart() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let state_arg = state.display().to_string();

    let first = Server::start_with(0, &["--state-dir", &state_arg]);
    let r = json_output(first.python("templates.py", &["build"]));
    assert!(
        r["marker_in_log"].as_bool().unwrap(),
        "the build's log is streamed: {r}"
    );
    assert_eq!(r["exists"], true);
    assert_eq!(r["exists_for_other"], false);
    assert_eq!(r["jq"], "7\n");
    assert_eq!(r["pip"], "iniconfig\n");
    assert_eq!(r["copied"], "hello from the build context");
    assert_eq!(r["tool"], "the tool ran\n");
    assert_eq!(r["tool_mode"], "755\n");
    assert_eq!(r["greeting"], "hi there\n");
    assert_eq!(r["built_as"], "user\n");
    assert_eq!(r["started"], "started\n");
    assert_eq!(r["by_tag"], "hello from the build context");
    assert!(r["other_create"].is_string(), "{r}");
    assert_eq!(r["layered"], "layered\njq-\n");
    assert_eq!(r["no_python"], "none\nwithout python", "{r}");
    assert_eq!(r["failing"][0], "BuildException", "{r}");
    assert!(r["failing_logged"].as_bool().unwrap(), "{r}");
    assert!(r["missing_image"].is_string(), "{r}");
    assert!(r["bad_step"].is_string(), "{r}");
    assert!(r["reserved"].is_string(), "{r}");
    assert_eq!(r["other_link"], 404);
    assert_eq!(r["link_present"], false);
    assert_eq!(r["guessed_token"], 403);
    assert_eq!(r["token_elsewhere"], 403);
    assert_eq!(r["good_token"], 200);
    assert_eq!(r["spent_token"], 403);
    assert_eq!(r["other_delete"], 404);
    assert_eq!(
        r["upload_cap"],
        serde_json::json!([200, 200, 200, 413, 200, 429]),
        "a key's waiting uploads are bounded"
    );
    let template_id = r["template_id"].as_str().unwrap().to_string();
    drop(first);
    let images = spec_images();

    // The template (its image and its start command) outlives the server.
    let second = Server::start_with(0, &["--state-dir", &state_arg]);
    let r = json_output(second.python("templates.py", &["after", &template_id]));
    assert_eq!(r["copied"], "hello from the build context");
    assert_eq!(r["started"], "started\n");
    assert_eq!(r["deleted"], serde_json::json!([204, 204]));
    assert_eq!(r["exists_after_delete"], false);
    assert!(r["create_after_delete"].is_string(), "{r}");
    drop(second);
    // Deleting the two templates removed their two images.
    let left = spec_images();
    assert_eq!(images.len() - left.len(), 2, "{images:?} -> {left:?}");
    // Uploads go with their builds.
    let uploads: Vec<_> = std::fs::read_dir(state.join("uploads")).unwrap().collect();
    assert!(uploads.is_empty(), "{uploads:?}");
}

/// A daemon that saves memory: gVisor registered, checkpoints on.
const GVISOR_DAEMON: &str = r#"{"experimental": true, "runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none"]}}}"#;

#[test]
fn memory_pauses_and_snapshots_through_the_sdks_under_gvisor() {
    if !second_daemon::runsc_installed() {
        return;
    }
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // The images serve's two templates run, made on the main daemon (the
    // second has no registry and no debootstrap of its own).
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (base, kernel) = runtime.block_on(async {
        let main = dockhand::Client::connect().await.unwrap();
        let base = dockhand::ImageSpec::default().trust_host_certificates();
        let science = dockhand::kernel::KernelConfig::data_science();
        let kernel = science
            .clone()
            .image(science.image_spec().clone().trust_host_certificates())
            .container_image();
        (
            main.resolve_image(&base).await.unwrap().reference,
            main.resolve_image(&kernel).await.unwrap().reference,
        )
    });
    let daemon = second_daemon::SecondDaemon::start(GVISOR_DAEMON, &base);
    daemon.load(&kernel);
    let cache = tempfile::tempdir().unwrap();
    let cache_dir = cache.path().display().to_string();
    let server = Server::start_with_env(
        0,
        &["--host", &daemon.endpoint, "--gvisor"],
        &[("DOCKHAND_CACHE_DIR", &cache_dir)],
    );
    let r = json_output(server.python("memory.py", &[]));
    assert_eq!(r["paused_state"], "paused");
    assert_eq!(
        r["after_resume"], "42",
        "a kernel's variable survives a pause: {r}"
    );
    assert_eq!(r["source_after_snapshot"], "41");
    assert_eq!(
        r["copy_memory"], "42",
        "a snapshot's sandbox has its memory: {r}"
    );
    assert_eq!(r["source_unchanged"], "41");
    assert_eq!(r["second_copy"], "41", "each sandbox from it starts alike");
    assert_eq!(r["files_only"], "NameError");
    assert_eq!(r["process_after_resume"], "alive\n");
    assert_eq!(r["auto_paused"], "paused");
    assert_eq!(r["auto_resumed"], "'kept in memory'", "{r}");
    assert_eq!(r["deleted"], serde_json::json!([true, true]));
    drop(server);
    // Nothing left on that daemon: sandboxes, memory snapshots' forks.
    let started = std::time::Instant::now();
    while daemon.containers_with_label("dev.dockhand.kind=session") > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "sessions left on the second daemon"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// SIGTERM while a command's stream is open: the server stops taking
/// connections, ends the stream with a retryable error at once, and exits
/// within its grace; the sandbox is kept and the next server runs commands
/// in it.
#[test]
fn a_restart_ends_open_streams_and_exits_within_its_grace() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let state_arg = state.display().to_string();
    let mut first = Server::start_with(0, &["--state-dir", &state_arg, "--shutdown-grace", "3"]);
    let mut holder = first
        .python("drain.py", &["hold"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(holder.stdout.take().unwrap()));
    let id = lines
        .next()
        .unwrap()
        .unwrap()
        .strip_prefix("running ")
        .expect("the sandbox runs")
        .to_string();
    // The command's stream is open (its `sleep` started).
    std::thread::sleep(Duration::from_secs(2));
    let signalled = std::time::Instant::now();
    unsafe { libc::kill(first.pid() as i32, libc::SIGTERM) };
    let status = loop {
        if let Some(status) = first.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(30),
            "the server still ran 30 s after SIGTERM (grace 3 s)"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let exited = signalled.elapsed();
    let ended: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    holder.wait().unwrap();
    eprintln!("SIGTERM with a command stream open: the server exited after {exited:?} ({status}); the command's call: {ended}");
    assert!(status.success(), "{status}");
    // Ended by the server, not by the command (which sleeps 120 s) or a
    // client-side timeout.
    assert_ne!(ended["ended"], "returned", "{ended}");
    assert!(ended["secs"].as_f64().unwrap() < 60.0, "{ended}");
    let second = Server::start_with(0, &["--state-dir", &state_arg]);
    let r = json_output(second.python("drain.py", &["after", &id]));
    assert_eq!(r["file"], "kept across the restart");
    assert_eq!(r["echo"], "after\n");
    drop(second);
}
