//! Benchmark: moving a large File input into a one-shot and a large File
//! output back to the host, and what each costs the host process in memory
//! (both stream through disk); then
//! one very long line on stdout read with and without a live output handler.
//!
//! ```text
//! cargo run --release --example bench_outputs -- [MiB] [line MB]   # default 1024, 600
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dockhand::{CacheMode, Client, RunOptions, Sandbox, Type, NO_INPUTS};

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

/// One transfer's figures: time, throughput and the peak RSS it added.
fn report(what: &str, mib: u64, took: Duration, before_kib: u64, after_kib: u64) {
    println!(
        "{what}: run took {:.1} s ({:.0} MiB/s end to end); peak RSS {} MiB before, {} MiB after (+{} MiB; target <= 64 MiB)",
        took.as_secs_f64(),
        mib as f64 / took.as_secs_f64(),
        before_kib / 1024,
        after_kib / 1024,
        after_kib.saturating_sub(before_kib) / 1024
    );
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mib: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1024);
    let client = Client::connect().await?;
    let writer = Sandbox::code(
        "big-file",
        format!(
            "chunk = b'x' * (1 << 20)\nwith open('/var/outputs/blob', 'wb') as f:\n    for _ in range({mib}):\n        f.write(chunk)\n"
        ),
    )
    .verbatim()
    .output("blob", Type::File)
    .outputs_limit((mib + 64) << 20)
    .cache(CacheMode::Disable)
    .build()?;
    // Warm up (image, connection) with a small run, then measure.
    client
        .run(
            &Sandbox::code("warm", "x = 1")
                .cache(CacheMode::Disable)
                .build()?,
            Vec::<(String, dockhand::Value)>::new(),
        )
        .await?;
    // The input direction first: the peak RSS only ever grows.
    let dir = tempfile::tempdir()?;
    let input = dir.path().join("input.bin");
    std::fs::File::create(&input)?.set_len(mib << 20)?;
    let reader = Sandbox::code("big-input", "import os\nsize = os.path.getsize(blob)")
        .input("blob", Type::File)
        .output("size", Type::Int)
        .cache(CacheMode::Disable)
        .build()?;
    let before = status_kib("VmHWM:");
    let started = Instant::now();
    let out = client
        .run(&reader, [("blob", dockhand::Value::file(&input))])
        .await?;
    let took = started.elapsed();
    let after = status_kib("VmHWM:");
    assert_eq!(
        out.get::<i64>("size")?,
        (mib << 20) as i64,
        "the File input arrived whole"
    );
    report(&format!("{mib} MiB File input"), mib, took, before, after);
    drop(dir);

    let before = status_kib("VmHWM:");
    let started = Instant::now();
    let out = client
        .run(&writer, Vec::<(String, dockhand::Value)>::new())
        .await?;
    let took = started.elapsed();
    let after = status_kib("VmHWM:");
    let path: std::path::PathBuf = out.get("blob")?;
    let size = std::fs::metadata(&path)?.len();
    assert_eq!(size, mib << 20, "the File output arrived whole");
    report(&format!("{mib} MiB File output"), mib, took, before, after);
    let line_mb: u64 = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(600);
    long_line(&client, line_mb).await
}

/// One `mb` MB line on stdout with no newline, read with and without a live
/// output handler: the handler gets it in 64 KiB pieces marked `partial`,
/// and the time with it should stay close to the time without it.
async fn long_line(client: &Client, mb: u64) -> Result<(), Box<dyn std::error::Error>> {
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
