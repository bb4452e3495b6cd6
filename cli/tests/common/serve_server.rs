//! A `dockhand serve` of a test's own, the E2B SDKs in a venv, and the
//! checks on what a server leaves behind.
#![allow(dead_code)] // each serve test binary uses its own part

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The SDK versions tested (the README names them).
/// The clients the tests drive the server with: the E2B SDKs, Prometheus'
/// own parser, selenium for the dashboard in Debian's chromium, and a
/// WebSocket client for ports inside sandboxes.
pub const SDKS: [&str; 5] = [
    "e2b==2.63.0",
    "e2b-code-interpreter==2.11.5",
    "prometheus_client==0.26.0",
    "selenium==4.51.0",
    "websockets==15.0.1",
];
pub const KEY: &str = "dockhand-test-key-one-0123456789";
pub const OTHER_KEY: &str = "dockhand-test-key-two-0123456789";

/// One server at a time: each test's containers load the machine enough.
pub static SERIAL: Mutex<()> = Mutex::new(());

pub struct Server {
    pub child: Child,
    pub url: String,
    /// `--max-upload`, as the server was started with.
    pub max_upload: String,
}

impl Server {
    pub fn start(pool: usize) -> Server {
        Server::start_with(pool, &[])
    }

    /// A server with these extra options.
    pub fn start_with(pool: usize, extra: &[&str]) -> Server {
        Server::start_with_env(pool, extra, &[])
    }

    /// A server with these extra options and environment variables.
    pub fn start_with_env(pool: usize, extra: &[&str], env: &[(&str, &str)]) -> Server {
        Server::launch(pool, extra, env, Stdio::inherit())
    }

    /// A server whose stderr (its logs) goes to `log`.
    pub fn start_logged(
        pool: usize,
        extra: &[&str],
        env: &[(&str, &str)],
        log: &std::path::Path,
    ) -> Server {
        let file = std::fs::File::create(log).expect("a log file");
        Server::launch(pool, extra, env, Stdio::from(file))
    }

    fn launch(pool: usize, extra: &[&str], env: &[(&str, &str)], stderr: Stdio) -> Server {
        let small_uploads = ["--max-upload", "8388608"];
        let extra: Vec<&str> = if extra.contains(&"--max-upload") {
            extra.to_vec()
        } else {
            extra.iter().chain(&small_uploads).copied().collect()
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(env!("CARGO_BIN_EXE_dockhand"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--pool", &pool.to_string()])
            .args(&extra)
            .env("DOCKHAND_SERVE_API_KEYS", format!("{KEY},{OTHER_KEY}"))
            // One line per request would bury the tests' own output.
            .env("DOCKHAND_LOG", "warn,dockhand::serve=info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(stderr)
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
        let max_upload = extra
            .iter()
            .position(|a| *a == "--max-upload")
            .and_then(|i| extra.get(i + 1))
            .map_or_else(|| "104857600".to_string(), |v| v.to_string());
        Server {
            child,
            url: format!("http://127.0.0.1:{port}"),
            max_upload,
        }
    }

    pub fn python(&self, script: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(venv());
        cmd.arg(script_path(script))
            .args(args)
            .env("E2B_API_URL", &self.url)
            .env("E2B_SANDBOX_URL", &self.url)
            .env("E2B_VOLUME_API_URL", &self.url)
            .env("MAX_UPLOAD", &self.max_upload)
            .env("E2B_API_KEY", KEY)
            .env("OTHER_KEY", OTHER_KEY)
            .env_remove("E2B_DOMAIN")
            // A crash of the client (a signal, say, at exit) prints every
            // thread's Python stack to the test's output.
            .env("PYTHONFAULTHANDLER", "1")
            .stderr(Stdio::inherit());
        cmd
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the server (SIGTERM) and asserts none of its sandboxes is
    /// left within `limit`.
    pub fn stop_leaving_nothing(self, limit: Duration) {
        let pid = self.pid();
        drop(self);
        assert_eq!(wait_until_none(pid, limit), Vec::<String>::new());
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

pub fn venv() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("venv-e2b-sdks");
    let python = dir.join("bin/python");
    // The marker names what was installed: a changed list installs again.
    let marker = dir.join(".ready");
    let wanted = SDKS.join(" ");
    if std::fs::read_to_string(&marker).ok().as_deref() != Some(wanted.as_str()) {
        let run = |cmd: &mut Command| assert!(cmd.status().expect("runs").success(), "{cmd:?}");
        if !python.exists() {
            run(Command::new("python3").args(["-m", "venv"]).arg(&dir));
        }
        run(Command::new(&python)
            .args(["-m", "pip", "install", "-q"])
            .args(SDKS));
        std::fs::write(&marker, wanted).unwrap();
    }
    python
}

/// Runs `flood.py` (hostile and bulk clients, standard library only) with
/// `args`; its one JSON line.
pub fn flood(args: &[&str]) -> Value {
    let out = Command::new(venv())
        .arg(script_path("flood.py"))
        .args(args)
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "flood.py {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).expect("one JSON line")
}

/// One `POST /sandboxes` of the `base` template with `KEY`, made by hand
/// (no SDK): `flood.py raw`'s answer (`status`, `body`).
pub fn raw_create(url: &str) -> Value {
    flood(&[
        "raw",
        url,
        KEY,
        "POST",
        "/sandboxes",
        r#"{"templateID": "base"}"#,
    ])
}

pub fn script_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/e2b")
        .join(name)
}

pub fn json_output(mut cmd: Command) -> Value {
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
pub fn owned(pid: u32, sandboxes_only: bool) -> Vec<String> {
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

pub fn owned_containers(pid: u32) -> Vec<String> {
    owned(pid, true)
}

pub fn wait_until_none(pid: u32, limit: Duration) -> Vec<String> {
    let started = Instant::now();
    loop {
        let left = owned_containers(pid);
        if left.is_empty() || started.elapsed() > limit {
            return left;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}
