//! Benchmark: cold runs, pooled runs and the docker CLI side by side in one
//! run: latency (p50/p95), session and code-host starts from pools, and
//! jobs/s at 1, 8 and 32 concurrent.
//!
//! ```text
//! cargo run --release --example bench_pool -- [N]
//! ```

#[path = "common/host_cpu.rs"]
mod host_cpu;
use host_cpu::{host_cpu, ProcessCpu, TICKS_PER_SECOND};
use std::future::Future;
use std::time::{Duration, Instant};

use dockhand::codemode::CodeHostConfig;
use dockhand::pool::PoolConfig;
use dockhand::session::SessionConfig;
use dockhand::{CacheMode, Client, Sandbox, Type};
use futures::stream::{self, StreamExt};

const FILL: Duration = Duration::from_secs(120);

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn summary(name: &str, mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let (p50, p95) = (percentile(&samples, 0.50), percentile(&samples, 0.95));
    println!(
        "{name:<34} n={:<4} p50={:>7.1} ms  p95={:>7.1} ms",
        samples.len(),
        ms(p50),
        ms(p95)
    );
    (p50, p95)
}

fn job() -> dockhand::Result<Sandbox> {
    Sandbox::code("double", "result = x * 2")
        .input("x", Type::Int)
        .output("result", Type::Int)
        .cache(CacheMode::Disable)
        .build()
}

async fn cli_run(image: &str) -> std::io::Result<()> {
    let out = tokio::process::Command::new("docker")
        .args(["run", "--rm", "--network", "none", image])
        .args(["python3", "-c", "print(21 * 2)"])
        .output()
        .await?;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "42");
    Ok(())
}

/// Host CPU milliseconds per job between two `host_cpu` readings, and how
/// busy the host was (share of all cores).
fn cpu_per_job(before: Option<(u64, u64)>, after: Option<(u64, u64)>, jobs: usize) -> String {
    match (before, after) {
        (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => {
            let busy_ms = (b1 - b0) as f64 * 1e3 / TICKS_PER_SECOND;
            format!(
                "{:.0} ms of host CPU per job, cores {:.0}% busy",
                busy_ms / jobs as f64,
                100.0 * (b1 - b0) as f64 / (t1 - t0) as f64
            )
        }
        _ => "host CPU not measured".into(),
    }
}

/// Jobs per second running `jobs` calls of `one` with `concurrency` in flight.
async fn throughput<F, Fut>(jobs: usize, concurrency: usize, one: F) -> f64
where
    F: Fn() -> Fut,
    Fut: Future<Output = ()>,
{
    let t = Instant::now();
    stream::iter(0..jobs)
        .for_each_concurrent(concurrency, |_| one())
        .await;
    jobs as f64 / t.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(30);
    let client = Client::connect().await?;
    let double = job()?;
    let image = client.resolve_image(double.image()).await?.reference;
    if std::env::var_os("BENCH_POOL_SUSTAINED_ONLY").is_some() {
        return sustained(&client, &double).await;
    }
    let pool = client.pool(&double, PoolConfig::new(2)).await?;
    assert!(pool.wait_ready(FILL).await, "the pool did not fill");
    // Warm every path once (page cache, daemon caches).
    client.run(&double, [("x", 21)]).await?;
    pool.run([("x", 21)]).await?;
    cli_run(&image).await?;

    // Latency: interleaved so drift in the machine's load hits all alike.
    // Pooled runs start with the pool full, as after any idle moment.
    let (mut cold, mut pooled, mut cli) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let t = Instant::now();
        let out = client.run(&double, [("x", 21)]).await?;
        cold.push(t.elapsed());
        assert_eq!(out.get::<i64>("result")?, 42);

        pool.wait_ready(FILL).await;
        let t = Instant::now();
        let out = pool.run([("x", 21)]).await?;
        pooled.push(t.elapsed());
        assert_eq!(out.get::<i64>("result")?, 42);

        let t = Instant::now();
        cli_run(&image).await?;
        cli.push(t.elapsed());
    }
    println!("one-shot `result = x * 2`, image cached, {n} runs each:");
    let (cold50, cold95) = summary("cold Client::run", cold);
    let (cli50, cli95) = summary("docker run --rm (CLI)", cli);
    let (warm50, warm95) = summary("pooled SandboxPool::run", pooled);
    println!(
        "ratio to the CLI: cold p50 {:.2}x p95 {:.2}x; pooled p50 {:.2}x p95 {:.2}x",
        ms(cold50) / ms(cli50),
        ms(cold95) / ms(cli95),
        ms(warm50) / ms(cli50),
        ms(warm95) / ms(cli95),
    );
    let stats = pool.stats();
    println!(
        "pool: {} handed over, {} misses, {} fill failures",
        stats.handed_over, stats.misses, stats.fill_failures
    );
    pool.shutdown().await;

    // Starts: cold, and from a full pool.
    let sessions = client
        .session_pool(SessionConfig::new(), PoolConfig::new(1))
        .await?;
    let hosts = client
        .code_host_pool(CodeHostConfig::new(), PoolConfig::new(1))
        .await?;
    let (mut session_cold, mut session_pool) = (Vec::new(), Vec::new());
    let (mut host_cold, mut host_pool) = (Vec::new(), Vec::new());
    for _ in 0..n.min(10) {
        let s = client.session(SessionConfig::new());
        let t = Instant::now();
        s.start().await?;
        session_cold.push(t.elapsed());
        s.close().await?;

        sessions.wait_ready(FILL).await;
        let t = Instant::now();
        let s = sessions.session().await?;
        session_pool.push(t.elapsed());
        s.close().await?;

        let h = client.code_host(CodeHostConfig::new());
        let t = Instant::now();
        h.start().await?;
        host_cold.push(t.elapsed());
        h.close().await?;

        hosts.wait_ready(FILL).await;
        let t = Instant::now();
        let h = hosts.host().await?;
        host_pool.push(t.elapsed());
        h.close().await?;
    }
    summary("session start, cold", session_cold);
    summary("session start, from a pool", session_pool);
    summary("code host start, cold", host_cold);
    summary("code host start, from a pool", host_pool);
    sessions.shutdown().await;
    hosts.shutdown().await;

    // Throughput.
    println!("\njobs/s (higher is better), {} jobs per cell:", 40);
    println!(
        "{:<12}{:>10}{:>10}{:>10}{:>14}{:>14}",
        "concurrent", "CLI", "cold", "pooled", "cold/CLI", "pooled/CLI"
    );
    for concurrency in [1usize, 8, 32] {
        let jobs = 40;
        let cli_rate = throughput(jobs, concurrency, || async {
            cli_run(&image).await.expect("docker run");
        })
        .await;
        let cold_rate = throughput(jobs, concurrency, || async {
            client.run(&double, [("x", 21)]).await.expect("cold run");
        })
        .await;
        let pool = client.pool(&double, PoolConfig::new(concurrency)).await?;
        pool.wait_ready(FILL).await;
        let pool_rate = throughput(jobs, concurrency, || async {
            pool.run([("x", 21)]).await.expect("pooled run");
        })
        .await;
        pool.shutdown().await;
        println!(
            "{concurrency:<12}{cli_rate:>10.1}{cold_rate:>10.1}{pool_rate:>10.1}{:>13.2}x{:>13.2}x",
            cold_rate / cli_rate,
            pool_rate / cli_rate
        );
    }

    sustained(&client, &double).await
}

/// Sustained load: many jobs (the second argument, default 200) at 16
/// concurrent through a pool of 16 that may grow to 32, beside cold runs at
/// the same concurrency. `BENCH_POOL_SUSTAINED_ONLY=1` runs only this part.
async fn sustained(
    client: &Client,
    double: &dockhand::Sandbox,
) -> Result<(), Box<dyn std::error::Error>> {
    // Sustained load: many jobs at 16 concurrent through a pool of 16 that
    // may grow to 32, beside cold runs at the same concurrency.
    let jobs: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let concurrency = 16;
    println!(
        "
sustained: {jobs} jobs at {concurrency} concurrent"
    );
    let cpu = host_cpu();
    let cold_rate = throughput(jobs, concurrency, || async {
        client.run(double, [("x", 21)]).await.expect("cold run");
    })
    .await;
    let cold_cpu = cpu_per_job(cpu, host_cpu(), jobs);
    let pool = client
        .pool(double, PoolConfig::new(16).max_size(32))
        .await?;
    pool.wait_ready(FILL).await;
    let cpu = host_cpu();
    let processes = ProcessCpu::now();
    let pool_rate = throughput(jobs, concurrency, || async {
        pool.run([("x", 21)]).await.expect("pooled run");
    })
    .await;
    // The refills still under way belong to the jobs that emptied the pool.
    pool.wait_ready(FILL).await;
    let pool_cpu = cpu_per_job(cpu, host_cpu(), jobs);
    let by_process = ProcessCpu::now().summary(&processes, jobs, 10);
    let stats = pool.stats();
    pool.shutdown().await;
    println!("cold: {cold_cpu}; pooled: {pool_cpu}");
    println!("pooled, ms of CPU per job by process: {}", by_process);
    let asked = stats.handed_over + stats.misses;
    println!(
        "cold {cold_rate:.2} jobs/s, pooled {pool_rate:.2} jobs/s ({:.2}x); \
         hits {}/{asked} ({:.0}%, {} of them waited for a container on its way), \
         the pool grew to {}",
        pool_rate / cold_rate,
        stats.handed_over,
        100.0 * stats.handed_over as f64 / asked.max(1) as f64,
        stats.waited,
        stats.size
    );
    Ok(())
}
