//! Benchmark of interactive sessions: the session agent beside the docker
//! CLI, in the same run: session start, `exec("echo hi")`, a one-line Python snippet,
//! 1 MiB write + read, close; the host CPU a start and close costs (every
//! process counted), and the agent's own memory (PSS) per session. Then:
//! the channel's own round trip (a `stat`), an HTTP
//! request to a server inside through `connect`, bytes per second through a
//! port both ways, and how soon a watch reports a file made. Last, a large
//! file (100 MiB, `BENCH_SESSION_LARGE_MIB` to change it) written from a
//! stream and read back as one, beside `docker cp` in and out.
//!
//! ```text
//! cargo run --release --example bench_session -- [N]
//! ```

#[path = "common/host_cpu.rs"]
mod host_cpu;

use std::process::Command;
use std::time::{Duration, Instant};

use dockhand::session::{FileEventKind, SessionApi, SessionConfig, SpawnOptions};
use dockhand::Client;
use futures::StreamExt;
use host_cpu::{ProcessCpu, TICKS_PER_SECOND};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn report(name: &str, mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "{name:<38} n={:<4} p50={:>8.2} ms  p95={:>8.2} ms",
        samples.len(),
        at(0.5).as_secs_f64() * 1e3,
        at(0.95).as_secs_f64() * 1e3
    );
    at(0.5)
}

fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("docker CLI")
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let v = f();
    (v, t.elapsed())
}

/// The proportional set size of a container's first process (the agent),
/// in KiB, read on the host.
fn agent_pss_kib(container: &str) -> Option<u64> {
    let out = docker(&["inspect", "-f", "{{.State.Pid}}", container]);
    let pid = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    rollup
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// One agent's figures.
#[derive(Default)]
struct Figures {
    starts: Vec<Duration>,
    execs: Vec<Duration>,
    pys: Vec<Duration>,
    files: Vec<Duration>,
    closes: Vec<Duration>,
    /// Host CPU milliseconds per start + close, and by process.
    cpu_ms: f64,
    by_process: String,
    pss_kib: Vec<u64>,
}

impl Figures {
    /// The agent's median PSS, in MiB.
    fn pss_mib(&self) -> f64 {
        let mut kib = self.pss_kib.clone();
        kib.sort();
        kib.get(kib.len() / 2).map_or(0.0, |k| *k as f64 / 1024.0)
    }
}

async fn measure(
    client: &Client,
    rounds: usize,
    commands: usize,
    mib: &[u8],
) -> Result<Figures, Box<dyn std::error::Error>> {
    let mut f = Figures::default();
    for _ in 0..rounds {
        let t = Instant::now();
        let s = client.session(SessionConfig::new());
        s.start().await?;
        f.starts.push(t.elapsed());
        if let Some(id) = s.describe().container_id {
            f.pss_kib.extend(agent_pss_kib(&id));
        }
        for _ in 0..commands {
            let t = Instant::now();
            let r = s.exec("echo hi").await?;
            f.execs.push(t.elapsed());
            assert_eq!(r.stdout, "hi\n");
            let t = Instant::now();
            let r = s.exec("python3 -c 'print(6 * 7)'").await?;
            f.pys.push(t.elapsed());
            assert_eq!(r.stdout, "42\n");
        }
        let t = Instant::now();
        s.write_file("blob.bin", mib).await?;
        let back = s.read_file("blob.bin").await?;
        f.files.push(t.elapsed());
        assert_eq!(back.len(), mib.len());
        let t = Instant::now();
        s.close().await?;
        f.closes.push(t.elapsed());
    }
    // Starts and closes alone, one after another, every process counted.
    let cycles = rounds.max(10);
    let before = ProcessCpu::now();
    let cpu = host_cpu::host_cpu();
    for _ in 0..cycles {
        let s = client.session(SessionConfig::new());
        s.start().await?;
        s.close().await?;
    }
    if let (Some((busy0, _)), Some((busy1, _))) = (cpu, host_cpu::host_cpu()) {
        f.cpu_ms = (busy1 - busy0) as f64 * 1e3 / TICKS_PER_SECOND / cycles as f64;
    }
    f.by_process = ProcessCpu::now().summary(&before, cycles, 8);
    Ok(f)
}

/// Ports and watching on one session.
async fn ports_and_watching(client: &Client, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    let s = client.session(SessionConfig::new());
    s.start().await?;
    let mut stats = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        s.stat(".").await?;
        stats.push(t.elapsed());
    }
    s.write_file("site/index.html", b"<h1>hi</h1>\n").await?;
    s.spawn(
        "cd site && exec python3 -m http.server 8000 --bind 127.0.0.1",
        SpawnOptions::new(),
    )
    .await?;
    s.spawn(
        "exec python3 -c \"import socket\nl = socket.socket(); l.bind(('127.0.0.1', 9000)); l.listen(4)\nwhile True:\n    c, _ = l.accept()\n    while (b := c.recv(1 << 16)): c.sendall(b)\n    c.close()\"",
        SpawnOptions::new(),
    )
    .await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.connect(8000).await.is_err() || s.connect(9000).await.is_err() {
        if Instant::now() > deadline {
            return Err("the servers in the session did not start".into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut gets = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let mut conn = s.connect(8000).await?;
        conn.write_all(b"GET /index.html HTTP/1.0\r\n\r\n").await?;
        let mut page = Vec::new();
        conn.read_to_end(&mut page).await?;
        gets.push(t.elapsed());
        assert!(page.ends_with(b"<h1>hi</h1>\n"));
    }
    let total = 64usize << 20;
    let conn = s.connect(9000).await?;
    let (mut from, mut to) = tokio::io::split(conn);
    let t = Instant::now();
    let writer = tokio::spawn(async move {
        let piece = vec![7u8; 1 << 16];
        for _ in 0..total / piece.len() {
            to.write_all(&piece).await?;
        }
        to.shutdown().await
    });
    let mut got = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    while got < total {
        let n = from.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        got += n;
    }
    let echo = t.elapsed();
    writer.await??;
    let mut watch = s.watch(".", true).await?;
    let mut seen_after = Vec::new();
    for i in 0..n {
        let name = format!("w{i}");
        let t = Instant::now();
        s.exec(&format!("touch {name}")).await?;
        loop {
            match watch.next().await {
                Some(Ok(e)) if e.path == name && e.kind == FileEventKind::Create => break,
                Some(Ok(_)) => continue,
                other => return Err(format!("the watch ended: {other:?}").into()),
            }
        }
        seen_after.push(t.elapsed());
    }
    s.close().await?;
    println!("ports and watching ({n} each):");
    report("stat (the agent channel's round trip)", stats);
    report("connect + HTTP GET through the agent", gets);
    println!(
        "{:<38} {:.1} MB/s each way ({} MiB echoed in {:.2} s)",
        "a port's echo, both ways at once",
        got as f64 / echo.as_secs_f64() / 1e6,
        got >> 20,
        echo.as_secs_f64()
    );
    report("exec(\"touch\") until its watch event", seen_after);
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50);
    let rounds = (n / 10).max(3);
    let commands = n / rounds;
    let client = Client::connect().await?;
    let image = client
        .resolve_image(&dockhand::ImageSpec::default())
        .await?
        .reference;
    let mib: Vec<u8> = (0..(1 << 20)).map(|i| (i % 251) as u8).collect();

    let fast = measure(&client, rounds, commands, &mib).await?;

    let (mut cli_starts, mut cli_closes, mut cli_execs, mut cli_pys, mut cli_files) =
        (vec![], vec![], vec![], vec![], vec![]);
    let host_file = std::env::temp_dir().join("dockhand-bench-1mib");
    std::fs::write(&host_file, &mib)?;
    for _ in 0..rounds {
        let (out, d) = timed(|| {
            docker(&[
                "run",
                "-d",
                "--network",
                "none",
                &image,
                "sleep",
                "infinity",
            ])
        });
        cli_starts.push(d);
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        for _ in 0..commands {
            cli_execs.push(timed(|| docker(&["exec", &id, "echo", "hi"])).1);
            cli_pys.push(timed(|| docker(&["exec", &id, "python3", "-c", "print(6 * 7)"])).1);
        }
        let (_, d) = timed(|| {
            docker(&[
                "cp",
                host_file.to_str().unwrap_or_default(),
                &format!("{id}:/tmp/blob.bin"),
            ]);
            docker(&["cp", &format!("{id}:/tmp/blob.bin"), "-"])
        });
        cli_files.push(d);
        cli_closes.push(timed(|| docker(&["rm", "-f", &id])).1);
    }
    let _ = std::fs::remove_file(&host_file);

    let fast_pss = fast.pss_mib();
    println!("interactive sessions ({rounds} sessions, {commands} commands each):");
    let start = report("start", fast.starts);
    report("docker run -d (CLI)", cli_starts);
    let exec = report("exec(\"echo hi\")", fast.execs);
    report("docker exec echo hi (CLI)", cli_execs);
    report("python one-liner", fast.pys);
    report("docker exec python3 -c (CLI)", cli_pys);
    report("write+read 1 MiB", fast.files);
    report("docker cp in + out 1 MiB (CLI)", cli_files);
    let close = report("close", fast.closes);
    report("docker rm -f (CLI)", cli_closes);
    println!("agent memory (PSS, p50): {fast_pss:.2} MiB");
    println!(
        "host CPU per start + close: {:.0} ms ({})",
        fast.cpu_ms, fast.by_process
    );
    println!(
        "targets: exec p50 <= 2 ms ({:.2} ms), start ({:.0} ms), close <= 500 ms ({:.0} ms)",
        ms(exec),
        ms(start),
        ms(close)
    );
    ports_and_watching(&client, n).await?;
    large_file(&client).await
}

/// A large file written from a stream and read back as one, beside
/// `docker cp` of the same bytes into and out of a container.
async fn large_file(client: &Client) -> Result<(), Box<dyn std::error::Error>> {
    let mib: usize = std::env::var("BENCH_SESSION_LARGE_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let block: Vec<u8> = (0..(1 << 20)).map(|i| (i * 7 % 251) as u8).collect();
    let s = client.session(SessionConfig::new());
    s.start().await?;
    let chunks = futures::stream::iter(
        (0..mib).map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from(block.clone()))),
    );
    let (written, up) = {
        let t = Instant::now();
        (
            s.write_file_from("large.bin", chunks, u64::MAX).await?,
            t.elapsed(),
        )
    };
    let t = Instant::now();
    let mut read = 0usize;
    let mut stream = std::pin::pin!(s.read_file_stream("large.bin", u64::MAX));
    while let Some(chunk) = stream.next().await {
        read += chunk?.len();
    }
    let down = t.elapsed();
    assert_eq!((written as usize, read), (mib << 20, mib << 20));
    let id = s.describe().container_id.unwrap_or_default();
    let host_file = std::env::temp_dir().join("dockhand-bench-large");
    std::fs::write(&host_file, block.repeat(mib))?;
    let (_, cp_in) = timed(|| {
        docker(&[
            "cp",
            host_file.to_str().unwrap_or_default(),
            &format!("{id}:/tmp/large-cp.bin"),
        ])
    });
    let (_, cp_out) = timed(|| {
        docker(&[
            "cp",
            &format!("{id}:/tmp/large-cp.bin"),
            host_file.to_str().unwrap_or_default(),
        ])
    });
    let _ = std::fs::remove_file(&host_file);
    s.close().await?;
    let rate = |d: Duration| mib as f64 / d.as_secs_f64();
    println!("a {mib} MiB file:");
    println!(
        "{:<38} {:>8.0} ms  {:>6.0} MiB/s",
        "write_file_from",
        ms(up),
        rate(up)
    );
    println!(
        "{:<38} {:>8.0} ms  {:>6.0} MiB/s",
        "read_file_stream",
        ms(down),
        rate(down)
    );
    println!(
        "{:<38} {:>8.0} ms  {:>6.0} MiB/s",
        "docker cp in (CLI)",
        ms(cp_in),
        rate(cp_in)
    );
    println!(
        "{:<38} {:>8.0} ms  {:>6.0} MiB/s",
        "docker cp out (CLI)",
        ms(cp_out),
        rate(cp_out)
    );
    Ok(())
}
