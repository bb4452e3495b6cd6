//! `dockhand serve` driven by the E2B SDKs themselves (`e2b` and
//! `e2b-code-interpreter` from PyPI, pinned below), against real containers:
//! the SDKs' public calls sync and async, tenants, traversal attempts, a
//! bounded load, and SIGKILL of the server.

mod common;

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The SDK versions tested (the README names them).
const SDKS: [&str; 2] = ["e2b==2.63.0", "e2b-code-interpreter==2.11.5"];
const KEY: &str = "dockhand-test-key-one-0123456789";
const OTHER_KEY: &str = "dockhand-test-key-two-0123456789";

/// One server at a time: each test's containers load the machine enough.
static SERIAL: Mutex<()> = Mutex::new(());

struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(pool: usize) -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(env!("CARGO_BIN_EXE_dockhand"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--pool", &pool.to_string()])
            .args(["--max-upload", &(8 << 20).to_string()])
            .env("DOCKHAND_SERVE_API_KEYS", format!("{KEY},{OTHER_KEY}"))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("dockhand serve starts");
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "serve never listened"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Server {
            child,
            url: format!("http://127.0.0.1:{port}"),
        }
    }

    fn python(&self, script: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(venv());
        cmd.arg(script_path(script))
            .args(args)
            .env("E2B_API_URL", &self.url)
            .env("E2B_SANDBOX_URL", &self.url)
            .env("E2B_API_KEY", KEY)
            .env("OTHER_KEY", OTHER_KEY)
            .env_remove("E2B_DOMAIN")
            // A crash of the client (a signal, say, at exit) prints every
            // thread's Python stack to the test's output.
            .env("PYTHONFAULTHANDLER", "1")
            .stderr(Stdio::inherit());
        cmd
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGTERM: the server kills its sandboxes and exits.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn venv() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("venv-e2b-sdks");
    let python = dir.join("bin/python");
    if !dir.join(".ready").exists() {
        let run = |cmd: &mut Command| assert!(cmd.status().expect("runs").success(), "{cmd:?}");
        run(Command::new("python3").args(["-m", "venv"]).arg(&dir));
        run(Command::new(&python)
            .args(["-m", "pip", "install", "-q"])
            .args(SDKS));
        std::fs::write(dir.join(".ready"), b"").unwrap();
    }
    python
}

fn script_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/e2b")
        .join(name)
}

fn json_output(mut cmd: Command) -> Value {
    let out = cmd.output().expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // The script's stderr is the test's own (see `Server::python`), above.
    assert!(
        out.status.success(),
        "the SDK script failed ({}); its stderr is above; stdout: {stdout}",
        out.status
    );
    serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("one JSON line")
}

/// The containers `pid` owns: its sandboxes (`kind=session`) or all.
fn owned(pid: u32, sandboxes_only: bool) -> Vec<String> {
    let mut cmd = Command::new("docker");
    cmd.args([
        "ps",
        "-aq",
        "--filter",
        &format!("label=dev.dockhand.owner-pid={pid}"),
    ]);
    if sandboxes_only {
        cmd.args(["--filter", "label=dev.dockhand.kind=session"]);
    }
    let out = cmd.output().expect("docker CLI");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

fn owned_containers(pid: u32) -> Vec<String> {
    owned(pid, true)
}

fn wait_until_none(pid: u32, limit: Duration) -> Vec<String> {
    let started = Instant::now();
    loop {
        let left = owned_containers(pid);
        if left.is_empty() || started.elapsed() > limit {
            return left;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

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
            "sub CREATE",
            "sub/deep.txt CREATE"
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
    assert_eq!(shapes["pause"], serde_json::json!([501, true]));

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
    assert_eq!(a["watch_events"], serde_json::json!(["x.txt CREATE"]));
    assert_eq!(a["killed"], true);
    assert_eq!(a["running_after_kill"], false);

    let pid = server.pid();
    drop(server);
    assert_eq!(
        wait_until_none(pid, Duration::from_secs(30)),
        Vec::<String>::new()
    );
}

#[test]
fn a_hundred_sandboxes_at_eight_at_once_all_work_and_none_is_left() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let server = Server::start(4);
    let r = json_output(server.python("load.py", &["100", "8"]));
    assert_eq!(r["failed"], 0, "{r}");
    assert_eq!(r["done"], 100, "{r}");
    assert_eq!(r["listed_after"], 0, "{r}");
    eprintln!("load: {r}");
    let pid = server.pid();
    // Killed ones are gone while the server still runs; what remains is
    // the two templates' warm pools.
    let warm = 2 * 4;
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
