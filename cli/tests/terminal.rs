//! `dockhand session attach` on a real pseudo-terminal, driven by pexpect
//! (from PyPI) as a user's terminal would drive it, and `dockhand session
//! expose` with curl, against the real daemon.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

mod common;

use common::dockhand;
use serde_json::Value;

/// Every process's command line in the session, one per line.
const PROCESS_LIST: &str =
    "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done";

fn driver(id: &str, mode: &str) -> Value {
    let python = common::venv_python(&["pexpect==4.9.0"]);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/terminal/attach.py");
    let out = Command::new(python)
        .arg(script)
        .args([env!("CARGO_BIN_EXE_dockhand"), id, mode])
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "attach.py {mode} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON line")
}

fn session_exec(id: &str, command: &str) -> String {
    let out = dockhand()
        .args(["session", "exec", id, command])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn attach_is_a_real_terminal_and_a_dropped_one_leaves_nothing_running() {
    let id = common::start_session();

    let typed = driver(&id, "typing");
    assert_eq!(typed["size"], serde_json::json!([30, 100]), "{typed}");
    assert!(
        typed["tty"].as_str().unwrap().starts_with("/dev/pts/"),
        "{typed}"
    );
    assert_eq!(typed["resized"], "40 120", "{typed}");
    assert_eq!(typed["one_key"], "x", "a key without Enter: {typed}");
    assert_eq!(typed["reached_after_interrupt"], false, "{typed}");
    assert!(typed["interrupt_s"].as_f64().unwrap() < 10.0, "{typed}");
    assert_eq!(typed["exit_code"], 7, "the shell's exit code: {typed}");
    assert_eq!(
        typed["canonical_after"], true,
        "the terminal left in raw mode: {typed}"
    );
    assert_eq!(typed["echo_after"], true, "{typed}");

    // A command killed while a program runs in its shell: the shell is hung
    // up and what it ran ends; the session serves the next command.
    let abandoned = driver(&id, "abandon");
    assert!(abandoned["killed"].as_u64().is_some(), "{abandoned}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let processes = session_exec(&id, PROCESS_LIST);
        if !processes.contains("sleep 1234") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still running 20 s after the attached command was killed:\n{processes}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    assert_eq!(session_exec(&id, "echo fine"), "fine\n");

    // A server inside, reached from the host through `expose` (the session
    // has no network).
    session_exec(
        &id,
        "mkdir -p site && echo exposed > site/index.html && cd site && \
         setsid python3 -m http.server 8000 --bind 127.0.0.1 >/dev/null 2>&1 &",
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let url = loop {
        let out = dockhand()
            .args(["session", "expose", &id, "8000"])
            .output()
            .unwrap();
        if out.status.success() {
            break String::from_utf8_lossy(&out.stdout).trim().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let page = Command::new("curl")
        .args(["-sS", "--max-time", "30", &format!("{url}/index.html")])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&page.stdout),
        "exposed\n",
        "{page:?}"
    );
    // Asked again, the same address.
    dockhand()
        .args(["session", "expose", &id, "8000"])
        .assert()
        .success()
        .stdout(format!("{url}\n"));
    dockhand()
        .args(["session", "expose", &id, "9999"])
        .assert()
        .failure()
        .stderr(predicates::str::contains("port 9999"));

    // An unknown session is a clear error, not a hang.
    dockhand()
        .args(["session", "attach", "s-no-such-session"])
        .assert()
        .code(2)
        .stderr(predicates::str::contains("no session"));

    dockhand()
        .args(["session", "close", &id])
        .assert()
        .success();
}
