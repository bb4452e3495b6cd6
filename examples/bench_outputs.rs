//! Benchmark: moving a large File output from a one-shot to the host, and
//! what it costs the host process in memory (outputs stream to disk).
//!
//! ```text
//! cargo run --release --example bench_outputs -- [MiB]   # default 1024
//! ```

use std::time::Instant;

use dockhand::{CacheMode, Client, Sandbox, Type};

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
    println!(
        "{mib} MiB File output: run took {:.1} s ({:.0} MiB/s end to end); peak RSS {} MiB before, {} MiB after (+{} MiB; target <= 64 MiB)",
        took.as_secs_f64(),
        mib as f64 / took.as_secs_f64(),
        before / 1024,
        after / 1024,
        after.saturating_sub(before) / 1024
    );
    Ok(())
}
