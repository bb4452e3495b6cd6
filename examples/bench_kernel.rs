//! Benchmark of kernels, each figure beside its floor measured in the same
//! run (`jupyter_client` talking to the same kernel inside the same
//! container: no host, agent or relay in between):
//!
//! - Python (the data-science image): kernel start cold (its modules bound
//!   for first use, and preloaded) and from a pool, a new context, the first
//!   use of the bound modules, the host CPU one kernel start costs (every
//!   process: the daemon, the runtime, the container) and the create rate
//!   two cores keep up with, `1 + 1`, `df.describe()` on 100k rows, a chart
//!   to PNG;
//! - every other language: a new context, `1 + 1`, `1`, `1+1`;
//! - the alternatives to ipykernel 7 for `1 + 1` (ipykernel 6, xeus-python),
//!   installed beside it in an image of their own.
//!
//! ```text
//! cargo run --release --example bench_kernel -- [N] [python|languages|alternatives]
//! ```

#[path = "common/host_cpu.rs"]
mod host_cpu;
use host_cpu::{host_cpu, ProcessCpu, TICKS_PER_SECOND};
use std::time::{Duration, Instant};

use dockhand::kernel::{ContextOptions, Kernel, KernelConfig, Language, RunOptions};
use dockhand::session::SessionApi;
use dockhand::{Client, ImageSpec};

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "{name:<52} n={:<4} p50={:>9.2} ms  p95={:>9.2} ms",
        samples.len(),
        at(0.5).as_secs_f64() * 1e3,
        at(0.95).as_secs_f64() * 1e3
    );
}

async fn times(
    kernel: &Kernel,
    code: &str,
    context: &str,
    n: usize,
) -> Result<Vec<Duration>, dockhand::Error> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let ex = kernel
            .run_with(code, RunOptions::new().context(context))
            .await?;
        samples.push(t.elapsed());
        if let Some(e) = ex.error {
            panic!("{code} raised {}: {}", e.name, e.value);
        }
    }
    Ok(samples)
}

/// `jupyter_client` in the container, against a fresh kernel there started
/// from a kernelspec written for it: `1 + 1` with no host, agent or relay.
const FLOOR: &str = r#"
import json, os, sys, tempfile, time
argv, code, n = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
home = tempfile.mkdtemp()
os.makedirs(os.path.join(home, "kernels", "k"))
with open(os.path.join(home, "kernels", "k", "kernel.json"), "w") as f:
    json.dump({"argv": argv, "display_name": "k", "language": "k"}, f)
os.environ["JUPYTER_PATH"] = home
os.environ.setdefault("DENO_DIR", os.path.join(home, "deno"))
from jupyter_client.manager import start_new_kernel
km, kc = start_new_kernel(kernel_name="k", startup_timeout=120)
samples = []
for _ in range(n + 5):
    t = time.perf_counter()
    kc.execute_interactive(code, output_hook=lambda m: None, timeout=30)
    samples.append((time.perf_counter() - t) * 1000)
samples = sorted(samples[5:])
print(json.dumps({"p50": samples[len(samples) // 2], "p95": samples[int((len(samples) - 1) * 0.95)]}))
kc.stop_channels(); km.shutdown_kernel(now=True)
"#;

/// The same with the leanest client: pyzmq and jupyter_client's `Session`
/// only, no polling loop, over unix sockets: what the kernel itself takes.
const RAW_FLOOR: &str = r#"
import json, os, subprocess, sys, tempfile, time, secrets
import zmq
from jupyter_client.session import Session
argv, code, n = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
d = tempfile.mkdtemp(); key = secrets.token_hex(16)
conn = dict(transport="ipc", ip=os.path.join(d, "k"), key=key, signature_scheme="hmac-sha256",
            shell_port=1, iopub_port=2, stdin_port=3, control_port=4, hb_port=5)
path = os.path.join(d, "c.json"); json.dump(conn, open(path, "w"))
proc = subprocess.Popen([a.replace("{connection_file}", path) for a in argv],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
s = Session(key=key.encode()); ctx = zmq.Context()
shell = ctx.socket(zmq.DEALER); shell.connect("ipc://%s-1" % conn["ip"])
iopub = ctx.socket(zmq.SUB); iopub.setsockopt(zmq.SUBSCRIBE, b""); iopub.connect("ipc://%s-2" % conn["ip"])
def recv(sock, timeout):
    if sock.poll(timeout):
        return s.deserialize(s.feed_identities(sock.recv_multipart())[1])
def run(code):
    m = s.msg("execute_request", dict(code=code, silent=False, store_history=True, user_expressions={},
                                      allow_stdin=False, stop_on_error=True))
    s.send(shell, m); mid = m["header"]["msg_id"]; idle = reply = False
    while not (idle and reply):
        for sock in zmq.select([shell, iopub], [], [], 30)[0]:
            r = recv(sock, 0)
            if r and (r["parent_header"] or {}).get("msg_id") == mid:
                reply |= r["msg_type"] == "execute_reply"
                idle |= r["msg_type"] == "status" and r["content"]["execution_state"] == "idle"
deadline = time.time() + 120
while time.time() < deadline:
    m = s.msg("kernel_info_request", {}); s.send(shell, m)
    if recv(shell, 500): break
time.sleep(0.5)
while recv(iopub, 50): pass
samples = []
for _ in range(n + 5):
    t = time.perf_counter(); run(code); samples.append((time.perf_counter() - t) * 1000)
samples = sorted(samples[5:])
print(json.dumps({"p50": samples[len(samples) // 2], "p95": samples[int((len(samples) - 1) * 0.95)]}))
proc.kill()
"#;

/// Prints the floor of `code` against the kernel `argv` starts.
async fn floor(kernel: &Kernel, name: &str, argv: &[&str], code: &str, n: usize) {
    floor_with(kernel, FLOOR, name, argv, code, n).await
}

async fn floor_with(
    kernel: &Kernel,
    client: &str,
    name: &str,
    argv: &[&str],
    code: &str,
    n: usize,
) {
    let argv = serde_json::to_string(argv).unwrap_or_default();
    let quote = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
    let command = format!(
        "python3 -c {} {} {} {n}",
        quote(client),
        quote(&argv),
        quote(code)
    );
    match kernel.exec(&command).await {
        Ok(out) => match serde_json::from_str::<serde_json::Value>(out.stdout.trim()) {
            Ok(v) => println!(
                "{:<52} n={n:<4} p50={:>9.2} ms  p95={:>9.2} ms",
                format!("  floor: {name}"),
                v["p50"].as_f64().unwrap_or(f64::NAN),
                v["p95"].as_f64().unwrap_or(f64::NAN)
            ),
            Err(_) => println!("  floor: {name} failed: {}", out.stderr.trim()),
        },
        Err(e) => println!("  floor: {name} failed: {e}"),
    }
}

/// Three cold starts of kernels of `config` (after one unmeasured start
/// that builds or finds the image), and the host CPU each start and close
/// cost, in seconds.
async fn cold_starts(
    client: &Client,
    config: &KernelConfig,
    label: &str,
) -> Result<(Vec<Duration>, f64), dockhand::Error> {
    let warm = client.kernel(config.clone());
    warm.start().await?;
    warm.close().await?;
    let mut starts = Vec::new();
    let (busy, _) = host_cpu().unwrap_or((0, 0));
    let processes = ProcessCpu::now();
    for _ in 0..3 {
        let kernel = client.kernel(config.clone());
        let t = Instant::now();
        kernel.start().await?;
        starts.push(t.elapsed());
        kernel.close().await?;
    }
    let (busy_after, _) = host_cpu().unwrap_or((0, 0));
    println!(
        "  {label} kernel start and close, ms of CPU by process: {}",
        ProcessCpu::now().summary(&processes, starts.len(), 8)
    );
    // Closing is in it too: a pool's kernel is closed by whoever took it.
    let cpu = (busy_after - busy) as f64 / TICKS_PER_SECOND / starts.len() as f64;
    Ok((starts, cpu))
}

async fn python(client: &Client, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    let base = KernelConfig::data_science();
    let image = base.image_spec().clone().trust_host_certificates();
    let config = base.image(image);
    // A plain kernel (ipykernel, nothing imported at start) for scale.
    let (plain, plain_cpu) = cold_starts(client, &KernelConfig::new(), "plain").await?;
    let (starts, cpu_per_start) = cold_starts(client, &config, "data-science").await?;
    // The same with pd, np and plt imported as each kernel starts.
    let preloaded_config = config.clone().preload_modules(true);
    let (preloaded, preloaded_cpu) =
        cold_starts(client, &preloaded_config, "data-science, modules preloaded").await?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;

    let kernel = client.kernel(config.clone());
    kernel.start().await?;
    let mut contexts = Vec::new();
    for i in 0..3 {
        let t = Instant::now();
        kernel.create_context(&format!("c{i}")).await?;
        contexts.push(t.elapsed());
    }
    let default = dockhand::kernel::DEFAULT_CONTEXT;
    times(&kernel, "1 + 1", default, 5).await?; // warm-up
    let plus = times(&kernel, "1 + 1", default, n).await?;
    // The first use of each bound module imports it, in each context.
    let mut first_use = Vec::new();
    for context in ["c0", "c1", "c2"] {
        let t = Instant::now();
        let ex = kernel
            .run_with(
                "pd.DataFrame({'a': np.arange(3)}); plt.figure(); plt.close('all')",
                RunOptions::new().context(context),
            )
            .await?;
        first_use.push(t.elapsed());
        if let Some(e) = ex.error {
            panic!("first use raised {}: {}", e.name, e.value);
        }
    }
    kernel
        .run("df = pd.DataFrame(np.random.default_rng(1).normal(size=(100_000, 4)), columns=list('abcd'))")
        .await?;
    kernel.run("plt.plot([1, 2]); plt.title('warm-up')").await?;
    let describe = times(&kernel, "df.describe()", default, (n / 2).max(5)).await?;
    let chart = times(
        &kernel,
        "plt.plot(np.arange(1000), np.sin(np.arange(1000) / 50)); plt.title('sine')",
        default,
        (n / 2).max(5),
    )
    .await?;

    println!("python (data-science image: pd, np, plt bound, imported on first use), n = {n}");
    report("  kernel start, cold (container + default context)", starts);
    println!(
        "  host CPU per kernel start and close: {cpu_per_start:.2} s (all processes): {cores} cores keep up with {:.2} starts/s",
        cores / cpu_per_start
    );
    report("  kernel start, cold, modules preloaded", preloaded);
    println!(
        "  host CPU per preloaded kernel start and close: {preloaded_cpu:.2} s: {cores} cores keep up with {:.2} starts/s",
        cores / preloaded_cpu
    );
    report("  first use of pd, np and plt in a context", first_use);
    report(
        "  kernel start, cold, plain Python (nothing imported)",
        plain,
    );
    println!("  host CPU per plain kernel start and close: {plain_cpu:.2} s");
    report("  new context in a running kernel", contexts);
    report("  run `1 + 1`", plus);
    report("  run `df.describe()` (100k x 4)", describe);
    report("  run a matplotlib line chart to PNG", chart);

    // From a pool: the container and the default context are up before
    // the kernel is asked for.
    let pool = client
        .kernel_pool(config.clone(), dockhand::pool::PoolConfig::new(1))
        .await?;
    let mut handovers = Vec::new();
    for _ in 0..3 {
        pool.wait_ready(Duration::from_secs(120)).await;
        let t = Instant::now();
        let pooled = pool.kernel().await?;
        handovers.push(t.elapsed());
        pooled.close().await?;
    }
    report("  kernel start from a pool (handover)", handovers);
    pool.shutdown().await;
    floor(
        &kernel,
        "ipykernel 7 (jupyter_client in the container)",
        &[
            "python3",
            "-m",
            "ipykernel_launcher",
            "-f",
            "{connection_file}",
        ],
        "1 + 1",
        n,
    )
    .await;
    kernel.close().await?;
    Ok(())
}

/// Each other language: a new context, trivial runs, the floor.
async fn languages(client: &Client, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    let config = KernelConfig::new().languages(Language::ALL);
    let image = config.image_spec().clone().trust_host_certificates();
    let kernel = client.kernel(config.image(image));
    kernel.start().await?;
    for (language, argv) in [
        (
            Language::JavaScript,
            vec!["deno", "jupyter", "--kernel", "--conn", "{connection_file}"],
        ),
        (
            Language::Bash,
            vec!["python3", "-m", "bash_kernel", "-f", "{connection_file}"],
        ),
        (
            Language::R,
            vec![
                "R",
                "--slave",
                "-e",
                "IRkernel::main()",
                "--args",
                "{connection_file}",
            ],
        ),
    ] {
        let name = language.as_str();
        let t = Instant::now();
        kernel
            .create_context_with(name, ContextOptions::new().language(language))
            .await?;
        let started = t.elapsed();
        let (one_plus_one, one, compact) = match language {
            Language::Bash => ("echo $((1 + 1))", "echo 1", "echo $((1+1))"),
            _ => ("1 + 1", "1", "1+1"),
        };
        times(&kernel, one_plus_one, name, 5).await?;
        println!("{name}, n = {n}");
        report("  new context (its kernel started)", vec![started]);
        report(
            &format!("  run `{one_plus_one}`"),
            times(&kernel, one_plus_one, name, n).await?,
        );
        report(
            &format!("  run `{one}`"),
            times(&kernel, one, name, n).await?,
        );
        report(
            &format!("  run `{compact}`"),
            times(&kernel, compact, name, n).await?,
        );
        floor(&kernel, name, &argv, one_plus_one, n).await;
    }
    kernel.close().await?;
    Ok(())
}

/// The floors of ipykernel 6 and xeus-python beside ipykernel 7's, each in
/// a venv of its own in one image.
async fn alternatives(client: &Client, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    let image = ImageSpec::default()
        .pip(["ipykernel", "jupyter_client"])
        .run("python3 -m venv /opt/ipykernel6 && /opt/ipykernel6/bin/pip install -q 'ipykernel<7'")
        .run("python3 -m venv /opt/xeus && /opt/xeus/bin/pip install -q xeus-python")
        .trust_host_certificates();
    let kernel = client.kernel(KernelConfig::new().image(image));
    kernel.start().await?;
    println!("the alternatives for `1 + 1` (each against jupyter_client, then a bare pyzmq client, in one container), n = {n}");
    let kernels: [(&str, &[&str]); 3] = [
        (
            "ipykernel 7",
            &[
                "python3",
                "-m",
                "ipykernel_launcher",
                "-f",
                "{connection_file}",
            ],
        ),
        (
            "ipykernel 6",
            &[
                "/opt/ipykernel6/bin/python",
                "-m",
                "ipykernel_launcher",
                "-f",
                "{connection_file}",
            ],
        ),
        (
            "xeus-python",
            &[
                "/opt/xeus/bin/python",
                "-m",
                "xpython_launcher",
                "-f",
                "{connection_file}",
            ],
        ),
    ];
    for (name, argv) in kernels {
        floor(&kernel, name, argv, "1 + 1", n).await;
        floor_with(
            &kernel,
            RAW_FLOOR,
            &format!("{name}, bare client"),
            argv,
            "1 + 1",
            n,
        )
        .await;
    }
    kernel.close().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50);
    let only = std::env::args().nth(2);
    let part = |name: &str| only.as_deref().is_none_or(|o| o == name);
    let client = Client::connect().await?;
    if part("python") {
        python(&client, n).await?;
    }
    if part("languages") {
        languages(&client, n).await?;
    }
    if part("alternatives") {
        alternatives(&client, n).await?;
    }
    Ok(())
}
