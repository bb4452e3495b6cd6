//! Benchmark of kernels: `1 + 1`, `df.describe()` on 100k rows, a matplotlib
//! chart to PNG, kernel and context start; beside the floor, `jupyter_client`
//! talking to the same ipykernel inside the same container (no host hop).
//!
//! ```text
//! cargo run --release --example bench_kernel -- [N]
//! ```

use std::time::{Duration, Instant};

use dockhand::kernel::{Kernel, KernelConfig};
use dockhand::session::SessionApi;
use dockhand::Client;

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "{name:<44} n={:<4} p50={:>9.2} ms  p95={:>9.2} ms",
        samples.len(),
        at(0.5).as_secs_f64() * 1e3,
        at(0.95).as_secs_f64() * 1e3
    );
}

async fn times(kernel: &Kernel, code: &str, n: usize) -> Result<Vec<Duration>, dockhand::Error> {
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let ex = kernel.run(code).await?;
        samples.push(t.elapsed());
        if let Some(e) = ex.error {
            panic!("{code} raised {}: {}", e.name, e.value);
        }
    }
    Ok(samples)
}

/// `jupyter_client` in the container, against a fresh ipykernel there: the
/// same `1 + 1` with no host, agent or relay in between.
const FLOOR: &str = r#"
import json, sys, time
from jupyter_client.manager import start_new_kernel
n = int(sys.argv[1])
km, kc = start_new_kernel()
samples = []
for _ in range(n + 5):
    t = time.perf_counter()
    kc.execute_interactive("1 + 1", output_hook=lambda m: None, timeout=30)
    samples.append((time.perf_counter() - t) * 1000)
samples = sorted(samples[5:])
print(json.dumps({"p50": samples[len(samples) // 2], "p95": samples[int((len(samples) - 1) * 0.95)]}))
kc.stop_channels(); km.shutdown_kernel(now=True)
"#;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50);
    let client = Client::connect().await?;
    let base = KernelConfig::data_science();
    let image = base.image_spec().clone().trust_host_certificates();
    let config = base.image(image);
    // Build (or find) the image before timing starts.
    client.kernel(config.clone()).start().await?;

    let mut starts = Vec::new();
    for _ in 0..3 {
        let kernel = client.kernel(config.clone());
        let t = Instant::now();
        kernel.start().await?;
        starts.push(t.elapsed());
        kernel.close().await?;
    }
    let kernel = client.kernel(config.clone());
    kernel.start().await?;
    let mut contexts = Vec::new();
    for i in 0..3 {
        let t = Instant::now();
        kernel.create_context(&format!("c{i}")).await?;
        contexts.push(t.elapsed());
    }

    times(&kernel, "1 + 1", 5).await?; // warm-up
    let plus = times(&kernel, "1 + 1", n).await?;
    kernel
        .run("df = pd.DataFrame(np.random.default_rng(1).normal(size=(100_000, 4)), columns=list('abcd'))")
        .await?;
    let describe = times(&kernel, "df.describe()", (n / 2).max(5)).await?;
    let chart = times(
        &kernel,
        "plt.plot(np.arange(1000), np.sin(np.arange(1000) / 50)); plt.title('sine')",
        (n / 2).max(5),
    )
    .await?;

    println!("kernels (data-science image, ipykernel in the container), n = {n}");
    report("kernel start (container + default context)", starts);
    report("new context in a running kernel", contexts);
    report("run `1 + 1`", plus);
    report("run `df.describe()` (100k x 4)", describe);
    report("run a matplotlib line chart to PNG", chart);

    // From a pool: the container and the default context (pandas,
    // matplotlib imported) are up before the kernel is asked for.
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
    report("kernel start from a pool (handover)", handovers);
    pool.shutdown().await;

    let floor = kernel.exec(&format!("python3 -c '{FLOOR}' {n}")).await?;
    match serde_json::from_str::<serde_json::Value>(floor.stdout.trim()) {
        Ok(v) => println!(
            "{:<44} n={n:<4} p50={:>9.2} ms  p95={:>9.2} ms",
            "floor: jupyter_client in the container",
            v["p50"].as_f64().unwrap_or(f64::NAN),
            v["p95"].as_f64().unwrap_or(f64::NAN)
        ),
        Err(_) => println!("floor: jupyter_client failed: {}", floor.stderr.trim()),
    }
    kernel.close().await?;
    Ok(())
}
