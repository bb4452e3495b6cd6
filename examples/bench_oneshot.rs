//! Benchmark: the quickstart job run N times with its image cached, beside the
//! same work through the docker CLI (`docker run --rm --network none ...`).
//!
//! ```text
//! cargo run --release --example bench_oneshot -- [N]
//! ```

use std::time::{Duration, Instant};

use dockhand::{CacheMode, Client, Sandbox, Type};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn summary(name: &str, mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let (p50, p95) = (percentile(&samples, 0.50), percentile(&samples, 0.95));
    println!(
        "{name:<28} n={:<4} p50={:>7.1} ms  p95={:>7.1} ms",
        samples.len(),
        p50.as_secs_f64() * 1e3,
        p95.as_secs_f64() * 1e3
    );
    (p50, p95)
}

/// The quickstart job with the given output cache mode.
fn quickstart_job(cache: CacheMode) -> dockhand::Result<Sandbox> {
    Sandbox::code("double", "result = x * 2")
        .input("x", Type::Int)
        .output("result", Type::Int)
        .cache(cache)
        .build()
}

/// The same work through the docker CLI.
fn cli_run(image: &str) -> std::io::Result<std::process::Output> {
    std::process::Command::new("docker")
        .args([
            "run",
            "--rm",
            "--network",
            "none",
            image,
            "python3",
            "-c",
            "print(21 * 2)",
        ])
        .output()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(30);
    let client = Client::connect().await?;
    // The output cache would answer every run after the first without a
    // container; measure the container path, then the cache separately.
    let double = quickstart_job(CacheMode::Disable)?;
    let image = client.resolve_image(double.image()).await?.reference;

    // Resolving an image that exists: what every new process pays once.
    let mut resolves = Vec::with_capacity(n);
    for _ in 0..n {
        let fresh = Client::connect().await?;
        let t = Instant::now();
        let r = fresh.resolve_image(double.image()).await?;
        resolves.push(t.elapsed());
        assert_eq!(r.source, dockhand::ImageSource::Cached);
    }

    // Warm both paths once (page cache, daemon caches).
    client.run(&double, [("x", 21)]).await?;
    cli_run(&image)?;

    let mut sdk = Vec::with_capacity(n);
    let mut cli = Vec::with_capacity(n);
    // Interleave so drift in the machine's load hits both alike.
    for _ in 0..n {
        let t = Instant::now();
        let out = client.run(&double, [("x", 21)]).await?;
        sdk.push(t.elapsed());
        assert_eq!(out.get::<i64>("result")?, 42);

        let t = Instant::now();
        let out = cli_run(&image)?;
        cli.push(t.elapsed());
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "42");
    }
    // The same job with the output cache on: one miss, then hits.
    let cache_dir = tempfile::tempdir()?;
    let cached_client = Client::builder()
        .cache_dir(cache_dir.path())
        .connect()
        .await?;
    let cached_job = quickstart_job(CacheMode::Auto)?;
    cached_client.run(&cached_job, [("x", 21)]).await?;
    let mut hits = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let out = cached_client.run(&cached_job, [("x", 21)]).await?;
        hits.push(t.elapsed());
        assert!(out.cached);
    }

    println!("one-shot run of `result = x * 2` (x = 21), image cached, {n} runs each:");
    let (sdk50, sdk95) = summary("dockhand Client::run", sdk);
    let (cli50, cli95) = summary("docker run --rm (CLI)", cli);
    println!(
        "ratio dockhand/CLI: p50 {:.2}x, p95 {:.2}x",
        sdk50.as_secs_f64() / cli50.as_secs_f64(),
        sdk95.as_secs_f64() / cli95.as_secs_f64()
    );
    summary("output cache hit", hits);
    summary("image resolve, cache hit", resolves);
    Ok(())
}
