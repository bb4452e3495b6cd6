//! Benchmark: one very long line on stdout (no newline at all), read with
//! and without a live output handler, with the host's peak memory.
//!
//! ```text
//! cargo run --release --example bench_live_output -- [MB]   # default 600
//! ```
//!
//! The handler gets the line in 64 KiB pieces marked `partial`; the time
//! with it should stay close to the time without it, and the host's memory
//! flat (the capture keeps only the first `output_limit` bytes).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dockhand::{CacheMode, Client, RunOptions, Sandbox, NO_INPUTS};

/// A field of /proc/self/status, in KiB (`VmRSS`, `VmHWM`).
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mb: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(600);
    let client = Client::connect().await?;
    let job = Sandbox::command("long-line", "sh")
        .args([
            "-c",
            &format!("head -c {} /dev/zero | tr '\\0' x", mb * 1_000_000),
        ])
        .timeout(Duration::from_secs(120))
        .cache(CacheMode::Disable)
        .build()?;
    client.run(&job, NO_INPUTS).await?; // warm up: image, connection
    println!("one {mb} MB line on stdout, no newline");
    println!(
        "{:<16} {:>9} {:>12} {:>10}",
        "", "seconds", "MB/s", "peak RSS"
    );
    let mut times = Vec::new();
    for with_handler in [false, true] {
        let pieces = Arc::new(AtomicU64::new(0));
        let bytes = Arc::new(AtomicU64::new(0));
        let options = if with_handler {
            let (pieces, bytes) = (pieces.clone(), bytes.clone());
            RunOptions::new().on_output(move |line| {
                pieces.fetch_add(1, Ordering::Relaxed);
                bytes.fetch_add(line.line.len() as u64, Ordering::Relaxed);
            })
        } else {
            RunOptions::new()
        };
        let started = Instant::now();
        let out = client.run_with(&job, NO_INPUTS, options).await?;
        let took = started.elapsed().as_secs_f64();
        times.push(took);
        assert_eq!(out.stdout.total_bytes as u64, mb * 1_000_000);
        println!(
            "{:<16} {:>9.2} {:>12.0} {:>7} MiB",
            if with_handler {
                "with handler"
            } else {
                "without handler"
            },
            took,
            mb as f64 / took,
            status_kib("VmHWM:") / 1024
        );
        if with_handler {
            println!(
                "  the handler saw {} pieces, {} MB",
                pieces.load(Ordering::Relaxed),
                bytes.load(Ordering::Relaxed) / 1_000_000
            );
        }
    }
    println!("with / without: {:.2}x", times[1] / times[0]);
    Ok(())
}
