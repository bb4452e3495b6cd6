//! Helpers shared by the integration tests (each test file is its own crate,
//! so not every helper is used by every file).
#![allow(dead_code)]

use dockhand::{Client, ImageSpec};

mod docker_cli;
#[allow(unused_imports)] // each test binary uses some helpers
pub use docker_cli::{containers_with_label, docker};

/// A client on the local daemon; build progress goes to the test's output.
/// Its output cache is private to this test process, so results cached by an
/// earlier run (or by the user) never stand in for a real run.
pub async fn client() -> Client {
    let cache = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cache-{}", std::process::id()));
    Client::builder()
        .cache_dir(cache)
        .on_progress(|p| {
            if !matches!(p.stage, dockhand::Stage::Bootstrap) {
                eprintln!("{p}")
            }
        })
        .connect()
        .await
        .expect("a Docker daemon must answer (see CONTRIBUTING.md)")
}

/// Images that install packages trust the host's CA bundle: outbound TLS may be
/// intercepted by a proxy (as on CI), and pip fails without it.
pub fn with_host_ca(spec: ImageSpec) -> ImageSpec {
    spec.trust_host_certificates()
}

/// Runs `python3 -c code` in `image` with the docker CLI; returns stdout.
pub fn docker_python(image: &str, code: &str) -> String {
    docker(&[
        "run",
        "--rm",
        "--network",
        "none",
        image,
        "python3",
        "-c",
        code,
    ])
}

/// Asserts that no container of sandbox `name` is left (containers of runs
/// that timed out are removed in the background: allow them 3 s).
pub fn assert_no_container(name: &str) {
    let label = format!("dev.dockhand.sandbox={name}");
    for _ in 0..30 {
        if containers_with_label(&label) == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("a container of sandbox {name} was left behind");
}

/// A started code host with these settings.
pub async fn code_host(config: dockhand::codemode::CodeHostConfig) -> dockhand::codemode::CodeHost {
    let host = client().await.code_host(config);
    host.start().await.expect("code host starts");
    host
}

/// The code error of a failed execution; panics on anything else.
pub fn code_error(
    result: dockhand::Result<dockhand::codemode::Execution>,
) -> dockhand::codemode::CodeError {
    match result {
        Err(dockhand::Error::Code(failure)) => failure.error,
        other => panic!("expected a code error, got {other:?}"),
    }
}

/// Whether a container with this id exists (running or not).
pub fn container_exists(id: &str) -> bool {
    let out = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("id={id}")])
        .output()
        .expect("docker CLI");
    !String::from_utf8_lossy(&out.stdout).trim().is_empty()
}

/// Waits up to 10 s for a container to be gone; panics if it stays.
pub async fn wait_gone(id: &str) {
    for _ in 0..50 {
        if !container_exists(id) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!("container {id} was left behind");
}

/// A `tracing` writer that keeps what it is given, for tests that assert
/// what the SDK logged.
#[derive(Clone, Default)]
pub struct LogCapture(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl LogCapture {
    /// Captures the SDK's debug log on this thread until the guard drops
    /// (tests on tokio's default single-threaded runtime see all of it).
    pub fn debug_on_this_thread() -> (Self, tracing::subscriber::DefaultGuard) {
        let log = Self::default();
        let guard = tracing::subscriber::set_default(
            tracing_subscriber::fmt()
                .with_max_level(tracing::Level::DEBUG)
                .with_writer(log.clone())
                .finish(),
        );
        (log, guard)
    }

    /// Everything written so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for LogCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogCapture {
    type Writer = LogCapture;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// The directories code hosts' sockets live in, on this machine (each lives
/// while its bridge connects).
pub fn socket_dirs() -> Vec<String> {
    let mut dirs: Vec<String> = std::fs::read_dir(std::env::temp_dir())
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("dockhand-bridge-"))
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}

/// Socket directories that are here now and were not in `before` (an old
/// one in `before` may have been swept away since: that is not new).
pub fn new_socket_dirs(before: &[String]) -> Vec<String> {
    socket_dirs()
        .into_iter()
        .filter(|d| !before.contains(d))
        .collect()
}

/// Runs `call` inside `try/except ToolError` on `host` and asserts that the
/// code caught a ToolError whose text holds `needle`.
pub async fn assert_catches_tool_error(
    host: &dockhand::codemode::CodeHost,
    call: &str,
    needle: &str,
    tools: &dockhand::codemode::Toolset,
) {
    let code =
        format!("try:\n    {call}\n    r = 'no error'\nexcept ToolError as e:\n    r = str(e)\nr");
    let caught = host
        .execute(&code, serde_json::json!({}), tools)
        .await
        .expect("the code runs");
    assert!(
        caught.value.as_str().is_some_and(|m| m.contains(needle)),
        "{call}: {:?}",
        caught.value
    );
}

/// A shell command listing every process's command line, one per line (the
/// base image has no `ps`).
pub const PROCESS_LIST: &str =
    "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done";

mod venv;
#[allow(unused_imports)] // each test binary uses some helpers
pub use venv::venv_python;

/// The data-science kernel, its image trusting the host's CA (pip behind a
/// TLS-intercepting proxy).
pub fn kernel_config() -> dockhand::kernel::KernelConfig {
    let c = dockhand::kernel::KernelConfig::data_science();
    let image = with_host_ca(c.image_spec().clone());
    c.image(image)
}

/// `code` run in `context` of `k`, which must answer (an error the code
/// raises is in the execution).
pub async fn run_in(
    k: &dockhand::kernel::Kernel,
    code: &str,
    context: &str,
) -> dockhand::kernel::Execution {
    k.run_with(code, dockhand::kernel::RunOptions::new().context(context))
        .await
        .expect("the kernel answers")
}

/// A started kernel.
pub async fn kernel(config: dockhand::kernel::KernelConfig) -> dockhand::kernel::Kernel {
    let k = client().await.kernel(config);
    k.start().await.expect("the kernel starts");
    k
}

/// Reads a terminal's output until what it showed contains `needle`;
/// `None` when it exited first (its exit code) or 20 s passed.
async fn screen_until(
    events: &mut futures::stream::BoxStream<
        'static,
        dockhand::Result<dockhand::session::ExecEvent>,
    >,
    screen: &mut String,
    needle: &str,
) -> Option<i64> {
    use dockhand::session::ExecEvent;
    use futures::StreamExt;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while !screen.contains(needle) {
        match tokio::time::timeout_at(deadline, events.next()).await {
            Ok(Some(Ok(ExecEvent::Stdout(b) | ExecEvent::Stderr(b)))) => {
                screen.push_str(&String::from_utf8_lossy(&b))
            }
            Ok(Some(Ok(ExecEvent::Exit(r)))) => return Some(r.exit_code),
            Ok(Some(Err(e))) => panic!("the terminal failed: {e}; it showed:\n{screen}"),
            Ok(None) => panic!("the terminal's events ended; it showed:\n{screen}"),
            Err(_) => panic!("no {needle:?} within 20 s; it showed:\n{screen}"),
        }
    }
    None
}

/// `Session::pty` as a user's terminal uses it: the size it was given and
/// a new one, `Ctrl-C` for the foreground command, the shell's exit code.
pub async fn check_terminal(s: &dockhand::session::Session) {
    let mut shell = s.pty(24, 80).await.expect("a terminal");
    let mut screen = String::new();
    shell.control.send_stdin(b"stty size; tty\n").await.unwrap();
    assert_eq!(
        screen_until(&mut shell.events, &mut screen, "/dev/pts/").await,
        None
    );
    assert!(screen.contains("24 80"), "{screen}");
    shell.control.resize(50, 132).await.unwrap();
    shell.control.send_stdin(b"stty size\n").await.unwrap();
    screen_until(&mut shell.events, &mut screen, "50 132").await;
    shell
        .control
        .send_stdin(b"sleep 30; echo NOT-$((3 * 3))\n")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let interrupted = std::time::Instant::now();
    shell.control.send_stdin(b"\x03").await.unwrap();
    shell
        .control
        .send_stdin(b"echo M-$((2 + 2))\n")
        .await
        .unwrap();
    screen_until(&mut shell.events, &mut screen, "M-4").await;
    assert!(
        interrupted.elapsed().as_secs() < 10,
        "Ctrl-C did not stop sleep"
    );
    assert!(!screen.contains("NOT-9"), "{screen}");
    shell.control.send_stdin(b"exit 3\n").await.unwrap();
    let code = screen_until(&mut shell.events, &mut screen, "\u{0}never").await;
    assert_eq!(code, Some(3), "{screen}");
}
