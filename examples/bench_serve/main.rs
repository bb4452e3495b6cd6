//! Benchmark of `dockhand serve` through the real E2B Python SDK: time to
//! interactive (create, then the first command's first output), cold (no
//! warm pool) and pooled, p50 and p95; beside it the same two requests made
//! by hand (httpx, no SDK) so the SDK's own share shows; `run_code("1+1")`
//! and sandboxes (create + first command) at steady rates, cold and pooled;
//! and 100 MiB uploads through the SDK (one at a time and four at once)
//! beside `docker cp` of the same bytes into the same sandbox, with the
//! server's peak memory; bursts of 100 creates at once (pool 8 and 100)
//! with the host CPU each costs, beside what a bare container costs the
//! daemon (`floor`); host memory per idle session and kernel.
//!
//! ```text
//! cargo run --release --example bench_serve -- [N] [sessions|rates|sustained|uploads|burst|floor|density]
//! ```
//! Builds `dockhand` (release) and a venv with the pinned SDKs under
//! `target/`.

#[path = "../common/host_cpu.rs"]
mod host_cpu;
use host_cpu::{host_cpu, ProcessCpu, TICKS_PER_SECOND};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SDKS: [&str; 2] = ["e2b==2.63.0", "e2b-code-interpreter==2.11.5"];
const KEY: &str = "dockhand-bench-key-0123456789abcdef";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(cmd: &mut Command) {
    let status = cmd.status().expect("runs");
    assert!(status.success(), "{cmd:?} failed");
}

fn venv() -> PathBuf {
    let dir = root().join("target/venv-e2b-sdks");
    let python = dir.join("bin/python");
    if !dir.join(".ready").exists() {
        run(Command::new("python3").args(["-m", "venv"]).arg(&dir));
        run(Command::new(&python)
            .args(["-m", "pip", "install", "-q"])
            .args(SDKS));
        std::fs::write(dir.join(".ready"), b"").expect("marker");
    }
    python
}

fn dockhand() -> PathBuf {
    run(Command::new(env!("CARGO"))
        .args(["build", "--release", "-q", "-p", "dockhand-cli"])
        .current_dir(root()));
    root().join("target/release/dockhand")
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

fn serve(bin: &Path, port: u16, pool: usize) -> Server {
    serve_with(bin, port, pool, None, &[])
}

/// A server whose stderr goes to `log` (to read its pool's figures from).
fn serve_logged(bin: &Path, port: u16, pool: usize, log: Option<&Path>) -> Server {
    serve_with(bin, port, pool, log, &[])
}

/// A server with these extra options.
fn serve_with(bin: &Path, port: u16, pool: usize, log: Option<&Path>, extra: &[&str]) -> Server {
    let stderr = match log {
        Some(path) => Stdio::from(std::fs::File::create(path).expect("a log file")),
        None => Stdio::inherit(),
    };
    let child = Command::new(bin)
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--pool", &pool.to_string()])
        .args(extra)
        .env("DOCKHAND_SERVE_API_KEYS", KEY)
        .env("DOCKHAND_LOG", "warn,dockhand::serve=info")
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
    Server(child)
}

/// What a steady rate of creates runs: `rate.py`'s kind, what it times,
/// the template whose pool it draws from and the pool's size.
struct Load {
    kind: &'static str,
    what: &'static str,
    template: &'static str,
    pool: usize,
}

/// The code interpreter: create + first `run_code("1+1")`, `--pool 4`.
const KERNELS: Load = Load {
    kind: "kernel",
    what: "create + first run_code(\"1+1\")",
    template: "code-interpreter-v1",
    pool: 4,
};

/// `load` at `rate` creates a second for `seconds`, through the SDK: each
/// create's time, the pool's hits, and host CPU per sandbox.
fn at_rate(python: &Path, bin: &Path, port: u16, load: &Load, rate: f64, seconds: f64) {
    let log = tempfile::NamedTempFile::new().expect("a log file");
    let server = serve_logged(bin, port, load.pool, Some(log.path()));
    let run = |rate: f64, seconds: f64| {
        sdk_script(
            python,
            port,
            "rate.py",
            &[load.kind.to_string(), rate.to_string(), seconds.to_string()],
        )
    };
    // The image is built and the pool filled before anything is timed.
    run(1.0, 1.0);
    std::thread::sleep(Duration::from_secs(20));
    let (busy0, total0) = host_cpu().unwrap_or((0, 0));
    let r = run(rate, seconds);
    let (busy1, total1) = host_cpu().unwrap_or((0, 0));
    drop(server);
    let n = r["samples"].as_array().map_or(0, Vec::len);
    let errors = r["errors"].as_array().map_or(0, Vec::len);
    let busy_share = (busy1 - busy0) as f64 / (total1 - total0).max(1) as f64;
    let cpu = (busy1 - busy0) as f64 / TICKS_PER_SECOND / n.max(1) as f64;
    report(&format!("  {rate}/s: {}", load.what), &r["samples"]);
    let max = r["samples"]
        .as_array()
        .and_then(|a| a.iter().filter_map(|x| x.as_f64()).reduce(f64::max))
        .unwrap_or(f64::NAN);
    let stats = std::fs::read_to_string(log.path()).unwrap_or_default();
    let pool = stats
        .lines()
        .find_map(|l| {
            l.split_once(&format!("pool {}", load.template))
                .map(|(_, rest)| rest)
        })
        .unwrap_or(" (no pool figures)");
    println!(
        "    max {max:.0} ms, {errors} errors; host CPU {:.0} ms per sandbox (all processes, the SDK's included; the host {:.0}% busy)",
        cpu * 1e3,
        busy_share * 100.0
    );
    println!("    pool{pool}");
    // Each kind of failure once, with how often it came.
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for e in r["errors"].as_array().into_iter().flatten() {
        let text = e.as_str().unwrap_or_default();
        let kind: String = text.chars().take(120).collect();
        *kinds.entry(kind).or_default() += 1;
    }
    for (kind, count) in kinds {
        println!("    {count} x {kind}");
    }
}

/// `n` creates at once through the SDK on a server with `--pool pool`:
/// each create's time, the failures, and the host CPU per create beside
/// the floor the host allows (the creates the pool cannot hand over, each
/// costing that CPU, shared by the cores).
fn burst(python: &Path, bin: &Path, port: u16, n: usize, pool: usize) {
    // Only `base` is pooled: a code interpreter pool of the same size
    // would start its kernels during the burst.
    let templates = tempfile::NamedTempFile::new().expect("a templates file");
    std::fs::write(
        templates.path(),
        r#"{"templates": {"code-interpreter-v1": {"kind": "kernel", "pool": 0}}}"#,
    )
    .expect("written");
    let path = templates.path().to_string_lossy().to_string();
    let extra = ["--max-sandboxes-per-key", "1000", "--templates", &path];
    let server = serve_with(bin, port, pool, None, &extra);
    // The pool full before the burst (its image built by the warm-up).
    sdk_script(python, port, "burst.py", &["1".to_string()]);
    std::thread::sleep(Duration::from_secs(5 + pool as u64 / 2));
    let (busy0, total0) = host_cpu().unwrap_or((0, 0));
    let processes = ProcessCpu::now();
    let started = Instant::now();
    let r = sdk_script(python, port, "burst.py", &[n.to_string()]);
    let wall = started.elapsed().as_secs_f64();
    let (busy1, total1) = host_cpu().unwrap_or((0, 0));
    let by_process = ProcessCpu::now().summary(&processes, n, 10);
    drop(server);
    let seconds: Vec<f64> = r["seconds"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_f64())
                .map(|s| s * 1e3)
                .collect()
        })
        .unwrap_or_default();
    let cores = (total1 - total0) as f64 / (wall * TICKS_PER_SECOND).max(1e-9);
    // Kills included: a create's share of the whole burst.
    let cpu = (busy1 - busy0) as f64 / TICKS_PER_SECOND / n.max(1) as f64;
    let floor = n.saturating_sub(pool) as f64 * cpu / cores.max(1.0);
    report(
        &format!("  {n} at once, --pool {pool}: create"),
        &serde_json::json!(seconds),
    );
    let max = seconds.iter().copied().fold(f64::NAN, f64::max);
    let errors = r["errors"].as_array().map_or(0, Vec::len);
    println!(
        "    max {max:.0} ms, {} of {n} made, {errors} failed; host CPU {:.0} ms per sandbox (create and kill); floor for the {} cold ones on {cores:.0} cores: {:.1} s",
        seconds.len(),
        cpu * 1e3,
        n.saturating_sub(pool),
        floor,
    );
    for e in r["errors"].as_array().into_iter().flatten().take(3) {
        println!("    e.g. {}", e.as_str().unwrap_or_default());
    }
    println!("    per sandbox, ms of CPU by process: {by_process}");
}

/// What the daemon alone costs per container, in the same run: `count`
/// bare containers of the base image (`sleep`, no network, no log) made,
/// started and removed through the Engine API on the daemon's socket,
/// every process counted but the client's (curl). No sandbox on this
/// daemon, of any tool, costs less.
fn container_floor(count: usize) {
    let socket = "/var/run/docker.sock";
    let api = |method: &str, path: &str, body: Option<&str>| {
        let mut cmd = Command::new("curl");
        cmd.args(["-sf", "--unix-socket", socket, "-X", method])
            .arg(format!("http://localhost/v1.41{path}"));
        if let Some(body) = body {
            cmd.args(["-H", "Content-Type: application/json", "-d", body]);
        }
        let out = cmd.output().expect("curl");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap_or_default()
    };
    let images = api(
        "GET",
        "/images/json?filters=%7B%22reference%22%3A%5B%22dockhand%2Fbase%22%5D%7D",
        None,
    );
    let Some(image) = images[0]["RepoTags"][0].as_str().map(String::from) else {
        println!("  (no dockhand/base image or no {socket}: the daemon's floor is not measured)");
        return;
    };
    let body = serde_json::json!({
        "Image": image,
        "Cmd": ["sleep", "infinity"],
        "HostConfig": {"NetworkMode": "none", "LogConfig": {"Type": "none"}},
    })
    .to_string();
    let processes = ProcessCpu::now();
    for _ in 0..count {
        let made = api("POST", "/containers/create", Some(&body));
        let id = made["Id"].as_str().unwrap_or_default().to_string();
        api("POST", &format!("/containers/{id}/start"), None);
        api("DELETE", &format!("/containers/{id}?force=true"), None);
    }
    // The client's own CPU is the benchmark's waited-for children (curl).
    let spent: Vec<(String, u64)> = ProcessCpu::now()
        .since(&processes)
        .into_iter()
        .filter(|(name, _)| !name.starts_with("bench_serve"))
        .collect();
    let total: u64 = spent.iter().map(|(_, t)| t).sum();
    println!(
        "  the daemon's floor: a bare container made, started and removed through the API costs {:.0} ms of host CPU ({})",
        host_cpu::ms_per_job(total, count),
        host_cpu::per_job(&spent, count, 8)
    );
}

/// Host memory per idle sandbox: MemAvailable before and after `n` idle
/// sandboxes of `template` (pool 0), divided by `n`.
fn density(python: &Path, bin: &Path, port: u16, n: usize, template: &str) {
    use std::io::Write;
    let server = serve_with(bin, port, 0, None, &["--max-sandboxes-per-key", "1000"]);
    let hold = |count: usize| {
        let args = [count.to_string(), template.to_string()];
        let (child, line) = script_child(python, port, "hold.py", &args);
        assert_eq!(line.trim(), "ready", "hold.py failed");
        child
    };
    // The image built and one sandbox's caches warm before measuring.
    let mut warm = hold(1);
    let _ = warm.stdin.take().expect("stdin").write_all(b"done\n");
    let _ = warm.wait();
    std::thread::sleep(Duration::from_secs(3));
    let before = mem_available_kib();
    let server_before = proc_kib(server.0.id(), "VmRSS:");
    let mut held = hold(n);
    // Idle: what starting them cost in passing is given back.
    std::thread::sleep(Duration::from_secs(10));
    let after = mem_available_kib();
    let server_after = proc_kib(server.0.id(), "VmRSS:");
    let _ = held.stdin.take().expect("stdin").write_all(b"done\n");
    let _ = held.wait();
    drop(server);
    let per = before.saturating_sub(after) as f64 / 1024.0 / n.max(1) as f64;
    println!(
        "  {n} idle `{template}` sandboxes: {per:.1} MiB of host memory each (MemAvailable {} -> {} MiB; the server's own {} -> {} MiB)",
        before / 1024,
        after / 1024,
        server_before / 1024,
        server_after / 1024,
    );
}

/// Starts `examples/bench_serve/<script>` with the SDK pointed at the
/// server on `port`, its stdin open for a later "go on"; the child and its
/// first line of output (it holds its stdout open no longer).
fn script_child(python: &Path, port: u16, script: &str, args: &[String]) -> (Child, String) {
    use std::io::BufRead;
    let url = format!("http://127.0.0.1:{port}");
    let mut child = Command::new(python)
        .arg(root().join("examples/bench_serve").join(script))
        .args(args)
        .env("E2B_API_URL", &url)
        .env("E2B_SANDBOX_URL", &url)
        .env("E2B_API_KEY", KEY)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("python runs");
    let mut line = String::new();
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    out.read_line(&mut line).expect("a line from the script");
    (child, line)
}

/// The host's MemAvailable, in KiB.
fn mem_available_kib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// A field of `/proc/<pid>/status`, in KiB.
fn proc_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Uploads through the SDK, then `docker cp` of the same bytes into the
/// same sandbox's container, `n` of each.
fn uploads(python: &Path, port: u16, server: &Server, n: usize) {
    use std::io::Write;
    let before = proc_kib(server.0.id(), "VmRSS:");
    let (mut child, line) = script_child(python, port, "upload_timing.py", &[n.to_string()]);
    let samples: serde_json::Value = serde_json::from_str(&line).expect("JSON");
    let peak = proc_kib(server.0.id(), "VmHWM:");
    let listed = Command::new("docker")
        .args(["ps", "-q", "--filter"])
        .arg(format!("label=dev.dockhand.owner-pid={}", server.0.id()))
        .args(["--filter", "label=dev.dockhand.kind=session"])
        .output()
        .expect("docker ps");
    let container = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .next()
        .expect("the sandbox's container")
        .to_string();
    let file = tempfile::NamedTempFile::new().expect("a temporary file");
    let block: Vec<u8> = (0..=255u8).cycle().take(1 << 20).collect();
    for _ in 0..100 {
        file.as_file().write_all(&block).expect("written");
    }
    let mut copies = Vec::new();
    for i in 0..n {
        let started = Instant::now();
        run(Command::new("docker")
            .arg("cp")
            .arg(file.path())
            .arg(format!("{container}:/home/user/cp-{i}")));
        copies.push(started.elapsed().as_secs_f64() * 1e3);
    }
    let _ = child.stdin.take().expect("stdin").write_all(b"done\n");
    let _ = child.wait();
    println!("uploads of 100 MiB into one sandbox:");
    report("  SDK: files.write, one at a time", &samples["one"]);
    report("  SDK: files.write, four at once (each)", &samples["four"]);
    report(
        "  docker cp of the same file (baseline)",
        &serde_json::json!(copies),
    );
    println!(
        "  server memory: {} MiB before, {} MiB at its peak",
        before / 1024,
        peak / 1024
    );
}

fn report(name: &str, samples: &serde_json::Value) {
    let mut v: Vec<f64> = samples
        .as_array()
        .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
        .unwrap_or_default();
    v.sort_by(f64::total_cmp);
    let at = |p: f64| v[((v.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "{name:<52} n={:<4} p50={:>8.1} ms  p95={:>8.1} ms",
        v.len(),
        at(0.5),
        at(0.95)
    );
}

/// Runs `examples/bench_serve/<script>` with the SDK pointed at the server
/// on `port`; its last line of output, as JSON.
fn sdk_script(python: &Path, port: u16, script: &str, args: &[String]) -> serde_json::Value {
    let url = format!("http://127.0.0.1:{port}");
    let out = Command::new(python)
        .arg(root().join("examples/bench_serve").join(script))
        .args(args)
        .env("E2B_API_URL", &url)
        .env("E2B_SANDBOX_URL", &url)
        .env("E2B_API_KEY", KEY)
        .stderr(Stdio::inherit())
        .output()
        .expect("python runs");
    assert!(out.status.success(), "{script} failed");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(text.lines().last().unwrap_or("{}")).expect("JSON")
}

fn measure(python: &Path, port: u16, n: usize, pause: f64, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![n.to_string(), pause.to_string()];
    args.extend(extra.iter().map(|a| a.to_string()));
    sdk_script(python, port, "sdk_timing.py", &args)
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    // A second argument runs one part: `sessions`, `rates`, `uploads`,
    // `burst` or `density`.
    let only = std::env::args().nth(2);
    let part = |name: &str| only.as_deref().is_none_or(|o| o == name);
    let python = venv();
    let bin = dockhand();
    let port = |offset: u16| 3900 + offset;

    if part("sessions") {
        let _server = serve(&bin, port(0), 0);
        // One unmeasured round builds what is missing and warms the caches.
        measure(&python, port(0), 1, 0.0, &[]);
        let cold = measure(&python, port(0), n, 0.0, &[]);
        println!("cold (no warm pool):");
        report("  SDK: create", &cold["sdk_create"]);
        report(
            "  SDK: create -> first output (time to interactive)",
            &cold["sdk_tti"],
        );
        report("  raw HTTP: create -> first output", &cold["raw_tti"]);
    }
    if part("sessions") {
        let _server = serve(&bin, port(1), 4);
        std::thread::sleep(Duration::from_secs(5));
        measure(&python, port(1), 1, 1.0, &[]);
        let pooled = measure(&python, port(1), n, 1.0, &["run_code"]);
        println!("pooled (4 warm, 1 s between creates to refill):");
        report("  SDK: create", &pooled["sdk_create"]);
        report(
            "  SDK: create -> first output (time to interactive)",
            &pooled["sdk_tti"],
        );
        report("  raw HTTP: create -> first output", &pooled["raw_tti"]);
        report("  SDK: run_code(\"1+1\")", &pooled["run_code"]);
    }
    if part("rates") {
        println!("code interpreter at a steady rate (pool 4, 30-s runs):");
        // Below, at and past what two cores sustain (cores / host CPU per
        // sandbox).
        for (i, rate) in [0.4, 1.0, 2.0].into_iter().enumerate() {
            at_rate(&python, &bin, port(3 + i as u16), &KERNELS, rate, 30.0);
        }
    }
    if part("sustained") {
        println!("sandboxes at a steady rate (create + first command, 30-s runs):");
        // Cold, then pooled, below and past what two cores sustain at the
        // host CPU a sandbox costs (the burst's figure).
        for (i, (rate, pool)) in [(2.0, 0), (4.0, 0), (4.0, 8), (8.0, 8)]
            .into_iter()
            .enumerate()
        {
            let load = Load {
                kind: "session",
                what: if pool == 0 {
                    "create + echo, --pool 0"
                } else {
                    "create + echo, --pool 8"
                },
                template: "base",
                pool,
            };
            at_rate(&python, &bin, port(10 + i as u16), &load, rate, 30.0);
        }
    }
    if part("uploads") {
        let server = serve(&bin, port(2), 0);
        uploads(&python, port(2), &server, n.min(5));
    }
    if part("burst") {
        println!("bursts of 100 creates at once (ComputeSDK's burst test: Daytona 611 ms, E2B 965 ms p95, on their machines):");
        burst(&python, &bin, port(6), 100, 8);
        burst(&python, &bin, port(7), 100, 100);
    }
    if part("burst") || only.as_deref() == Some("floor") {
        container_floor(30);
    }
    if part("density") {
        println!("host memory per idle sandbox:");
        density(&python, &bin, port(8), n.max(100), "base");
        density(
            &python,
            &bin,
            port(9),
            (n / 4).max(20),
            "code-interpreter-v1",
        );
    }
}
