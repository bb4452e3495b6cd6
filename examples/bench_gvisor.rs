//! Benchmark: the quickstart job under gVisor (`runsc`) beside the default
//! runtime (runc), interleaved in one run on one daemon.
//!
//! The daemon (`DOCKER_HOST`, else the local socket) must have `runsc`
//! registered; see the README's gVisor section.
//!
//! ```text
//! cargo run --release --example bench_gvisor -- [N]
//! ```

use std::time::{Duration, Instant};

use dockhand::{CacheMode, Client, Isolation, Sandbox, Type};

fn p(sorted: &[Duration], q: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * q).round() as usize].as_secs_f64() * 1e3
}

fn job(isolation: Isolation) -> dockhand::Result<Sandbox> {
    Sandbox::code("double", "result = x * 2")
        .input("x", Type::Int)
        .output("result", Type::Int)
        .cache(CacheMode::Disable)
        .isolation(isolation)
        .build()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(30);
    let client = Client::connect().await?;
    let runtimes = client.daemon_info().await?.runtimes;
    if !runtimes.iter().any(|r| r == "runsc") {
        eprintln!(
            "the daemon at {} has no runsc runtime (it has {}); register it as the README's \
             gVisor section says and point DOCKER_HOST at that daemon",
            client.endpoint(),
            runtimes.join(", ")
        );
        std::process::exit(2);
    }
    let jobs = [
        ("runc (default)", job(Isolation::Default)?),
        ("gVisor (runsc)", job(Isolation::Gvisor)?),
    ];
    let mut samples = vec![Vec::with_capacity(n), Vec::with_capacity(n)];
    for (_, sandbox) in &jobs {
        client.run(sandbox, [("x", 21)]).await?; // image and page cache warm
    }
    // Interleaved, so drift in the machine's load hits both alike.
    for _ in 0..n {
        for (i, (_, sandbox)) in jobs.iter().enumerate() {
            let t = Instant::now();
            let out = client.run(sandbox, [("x", 21)]).await?;
            samples[i].push(t.elapsed());
            assert_eq!(out.get::<i64>("result")?, 42);
        }
    }
    println!(
        "one-shot `result = x * 2`, image cached, {n} runs each, daemon {}:",
        client.endpoint()
    );
    let mut p50s = Vec::new();
    for ((name, _), mut s) in jobs.iter().zip(samples) {
        s.sort();
        println!(
            "{name:<16} p50={:>7.1} ms  p95={:>7.1} ms",
            p(&s, 0.5),
            p(&s, 0.95)
        );
        p50s.push(p(&s, 0.5));
    }
    println!("gVisor/runc p50: {:.2}x", p50s[1] / p50s[0]);
    Ok(())
}
