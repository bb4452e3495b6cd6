//! Benchmark of pause, resume, fork and snapshots, each beside what Docker
//! itself does for the same kind of container in the same run:
//!
//! - memory mode (gVisor checkpoints, on a private dockerd this benchmark
//!   starts with `experimental` on and `runsc` registered): a kernel holding
//!   a 1 GiB DataFrame of random numbers, paused and resumed by dockhand,
//!   beside `docker checkpoint create` / `docker start --checkpoint` of an
//!   identical kernel's container; a session forked to 4 with its memory;
//! - filesystem mode (the main daemon): a session paused and resumed,
//!   beside `docker stop` / `docker start` of the same container; a fork
//!   to 4; a session started from a snapshot.
//!
//! ```text
//! cargo run --release --example bench_persistence -- [N] [GiB]
//! ```
//!
//! Needs root (the private dockerd) and `runsc` for the memory part; without
//! them that part is skipped with the reason.

#[path = "../tests/common/second_daemon.rs"]
mod second_daemon;

use std::process::Command;
use std::time::{Duration, Instant};

use dockhand::kernel::{Kernel, KernelConfig};
use dockhand::session::{PauseMode, SessionApi, SessionConfig};
use dockhand::{Client, ImageSpec, Isolation};

const DAEMON: &str = r#"{"experimental": true, "runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none"]}}}"#;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn p50(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn line(name: &str, dockhand: Duration, docker: Option<Duration>) {
    match docker {
        Some(raw) => println!(
            "{name:<46} dockhand {:>9.1} ms   docker {:>9.1} ms   ratio {:.2}",
            ms(dockhand),
            ms(raw),
            dockhand.as_secs_f64() / raw.as_secs_f64()
        ),
        None => println!("{name:<46} dockhand {:>9.1} ms", ms(dockhand)),
    }
}

/// Runs `docker` against `host` and times it.
fn docker(host: &str, args: &[&str]) -> Duration {
    let started = Instant::now();
    let out = Command::new("docker")
        .args(["-H", host])
        .args(args)
        .output()
        .expect("the docker CLI runs");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    started.elapsed()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(5);
    let gib: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1.0);
    let main = Client::connect().await?;
    filesystem(&main, n).await?;
    if !std::path::Path::new("/usr/bin/runsc").exists() {
        println!("memory mode skipped: runsc is not installed (`apt-get install runsc`)");
        return Ok(());
    }
    memory(&main, gib).await
}

async fn filesystem(client: &Client, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    println!("== filesystem mode, main daemon ({n} rounds)");
    let s = client.session(SessionConfig::new().pausable(true));
    s.start().await?;
    s.write_file("data.bin", &vec![7u8; 8 << 20]).await?;
    let (mut pauses, mut resumes, mut both) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let t = Instant::now();
        s.pause(PauseMode::Filesystem).await?;
        let paused = t.elapsed();
        let t = Instant::now();
        s.resume().await?;
        let resumed = t.elapsed();
        assert_eq!(s.read_file("data.bin").await?.len(), 8 << 20);
        pauses.push(paused);
        resumes.push(resumed);
        both.push(paused + resumed);
    }
    // Docker's own stop and start of the same container.
    let id = s.describe().container_id.unwrap_or_default();
    let host = client.endpoint().to_string();
    let (mut stops, mut starts) = (Vec::new(), Vec::new());
    for _ in 0..n {
        stops.push(docker(&host, &["stop", "-t", "0", &id]));
        starts.push(docker(&host, &["start", &id]));
    }
    let (stop, start) = (p50(stops), p50(starts));
    line("pause (files), p50", p50(pauses), Some(stop));
    line("resume (files), p50", p50(resumes), Some(start));
    line(
        "pause + resume (files), p50 [goal 500 ms]",
        p50(both),
        Some(stop + start),
    );
    s.close().await?;

    let parent = client.session(SessionConfig::new().pausable(true));
    parent.start().await?;
    parent.write_file("state.txt", b"base").await?;
    let mut forks = Vec::new();
    for _ in 0..n.min(3) {
        let t = Instant::now();
        let made = parent.fork(4, PauseMode::Filesystem).await?;
        forks.push(t.elapsed());
        for f in made {
            f.close().await?;
        }
    }
    let mut fresh = Vec::new();
    for _ in 0..n.min(3) {
        let t = Instant::now();
        let starts = (0..4).map(|_| client.session(SessionConfig::new()));
        let sessions: Vec<_> = starts.collect();
        futures::future::try_join_all(sessions.iter().map(|s| s.start())).await?;
        fresh.push(t.elapsed());
        for s in sessions {
            s.close().await?;
        }
    }
    line("fork to 4 (files), p50 [goal 2 s]", p50(forks), None);
    line("  4 fresh sessions started at once, p50", p50(fresh), None);
    let snapshot = parent.snapshot().await?;
    let mut from = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let s = client.session(SessionConfig::new().from_snapshot(&snapshot));
        s.start().await?;
        from.push(t.elapsed());
        assert_eq!(s.read_file("state.txt").await?, b"base");
        s.close().await?;
    }
    line("create from a snapshot, p50", p50(from), None);
    client.remove_snapshot(&snapshot).await?;
    parent.close().await?;
    Ok(())
}

/// The code that fills a kernel with `gib` GiB of random numbers.
fn fill(gib: f64) -> String {
    let rows = (gib * f64::from(1u32 << 30) / (16.0 * 8.0)) as u64;
    format!(
        "import numpy as np, pandas as pd\n\
         df = pd.DataFrame(np.random.default_rng(7).random(({rows}, 16)))\n\
         probe = float(df.iloc[12345, 7])\n\
         int(df.memory_usage().sum())"
    )
}

fn kernel_config(gib: f64) -> KernelConfig {
    let memory = format!("{}Mi", (gib * 1024.0 * 2.5) as u64 + 1024);
    let science = KernelConfig::data_science();
    let image = science.image_spec().clone().trust_host_certificates();
    science.image(image).session(move |s| {
        s.isolation(Isolation::Gvisor)
            .pausable(true)
            .memory(memory.as_str())
            .pids(512)
            .start_timeout(Duration::from_secs(300))
    })
}

async fn memory(main: &Client, gib: f64) -> Result<(), Box<dyn std::error::Error>> {
    println!("== memory mode, gVisor on a private dockerd ({gib} GiB DataFrame)");
    let base = main.resolve_image(&ImageSpec::default()).await?;
    let kernel_image = main
        .resolve_image(&kernel_config(gib).container_image())
        .await?;
    let daemon = second_daemon::SecondDaemon::start(DAEMON, &base.reference);
    daemon.load(&kernel_image.reference);
    let client = Client::builder()
        .endpoint(&daemon.endpoint)
        .cache_dir(std::env::temp_dir().join(format!("dh-bench-persist-{}", std::process::id())))
        .connect()
        .await?;

    let ours = client.kernel(kernel_config(gib));
    let theirs = client.kernel(kernel_config(gib));
    for k in [&ours, &theirs] {
        k.start().await?;
        let bytes = k.run(&fill(gib)).await?;
        println!(
            "  kernel filled: {} bytes of DataFrame",
            bytes.text().unwrap_or("?")
        );
    }
    let expected = probe(&ours).await?;

    // Docker's own checkpoint and restore of the twin's container.
    let host = daemon.endpoint.clone();
    let id = theirs.session().describe().container_id.unwrap_or_default();
    let raw_pause = docker(&host, &["checkpoint", "create", &id, "raw"]);
    let raw_resume = docker(&host, &["start", "--checkpoint", "raw", &id]);

    let t = Instant::now();
    let paused = ours.pause(PauseMode::Memory).await?;
    let pause = t.elapsed();
    let t = Instant::now();
    ours.resume().await?;
    let resume = t.elapsed();
    assert_eq!(
        probe(&ours).await?,
        expected,
        "the DataFrame came back as it was"
    );
    let bytes = paused.checkpoint_bytes.unwrap_or(0);
    line(
        &format!("pause (memory, {gib} GiB) [goal 4 s, 1.1x docker]"),
        pause,
        Some(raw_pause),
    );
    line(
        &format!("resume (memory, {gib} GiB) [goal 1 s, 1.1x docker]"),
        resume,
        Some(raw_resume),
    );
    println!(
        "  checkpoint: {:.1} MiB written by runsc ({:.0} MiB/s); dockhand adds its seal and size reading on top of runsc's work, and copies nothing on a first pause",
        bytes as f64 / f64::from(1u32 << 20),
        bytes as f64 / f64::from(1u32 << 20) / raw_pause.as_secs_f64()
    );
    // A second cycle: runsc restores a container in place once, so the
    // checkpoint is moved into a fresh container (its files committed, the
    // checkpoint copied) at the pause.
    let t = Instant::now();
    ours.pause(PauseMode::Memory).await?;
    let second_pause = t.elapsed();
    let t = Instant::now();
    ours.resume().await?;
    let second_resume = t.elapsed();
    assert_eq!(probe(&ours).await?, expected);
    line("second pause (moves the checkpoint)", second_pause, None);
    line("second resume", second_resume, None);
    ours.close().await?;
    theirs.close().await?;

    let s = client.session(
        SessionConfig::new()
            .isolation(Isolation::Gvisor)
            .pausable(true),
    );
    s.start().await?;
    s.exec("python3 -c 'x = bytearray(64 << 20)' && echo ready")
        .await?;
    let t = Instant::now();
    let forks = s.fork(4, PauseMode::Memory).await?;
    line(
        "fork to 4 (memory, small session) [goal 2 s]",
        t.elapsed(),
        None,
    );
    for f in forks {
        f.close().await?;
    }
    s.close().await?;
    drop(daemon);
    Ok(())
}

async fn probe(kernel: &Kernel) -> Result<String, dockhand::Error> {
    Ok(kernel
        .run("float(df.iloc[12345, 7])")
        .await?
        .text()
        .unwrap_or_default()
        .to_string())
}
