//! Benchmark of interactive sessions beside the docker CLI: session start,
//! `exec("echo hi")`, a one-line Python snippet, 1 MiB write + read, close.
//!
//! ```text
//! cargo run --release --example bench_session -- [N]
//! ```

use std::process::Command;
use std::time::{Duration, Instant};

use dockhand::session::{SessionApi, SessionConfig};
use dockhand::Client;

fn report(name: &str, mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "{name:<34} n={:<4} p50={:>8.2} ms  p95={:>8.2} ms",
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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(50);
    let rounds = (n / 10).max(3);
    let client = Client::connect().await?;
    let image = client
        .resolve_image(&dockhand::ImageSpec::default())
        .await?
        .reference;
    let mib: Vec<u8> = (0..(1 << 20)).map(|i| (i % 251) as u8).collect();

    let (mut starts, mut closes, mut cli_starts, mut cli_closes) = (vec![], vec![], vec![], vec![]);
    let (mut execs, mut pys, mut files, mut cli_execs, mut cli_pys, mut cli_files) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let host_file = std::env::temp_dir().join("dockhand-bench-1mib");
    std::fs::write(&host_file, &mib)?;
    for _ in 0..rounds {
        // dockhand
        let t = Instant::now();
        let s = client.session(SessionConfig::new());
        s.start().await?;
        starts.push(t.elapsed());
        for _ in 0..n / rounds {
            let t = Instant::now();
            let r = s.exec("echo hi").await?;
            execs.push(t.elapsed());
            assert_eq!(r.stdout, "hi\n");
            let t = Instant::now();
            let r = s.exec("python3 -c 'print(6 * 7)'").await?;
            pys.push(t.elapsed());
            assert_eq!(r.stdout, "42\n");
        }
        let t = Instant::now();
        s.write_file("blob.bin", &mib).await?;
        let back = s.read_file("blob.bin").await?;
        files.push(t.elapsed());
        assert_eq!(back.len(), mib.len());
        let t = Instant::now();
        s.close().await?;
        closes.push(t.elapsed());

        // docker CLI
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
        for _ in 0..n / rounds {
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

    println!(
        "interactive sessions ({rounds} sessions, {} commands each):",
        n / rounds
    );
    report("dockhand start", starts);
    report("docker run -d (CLI)", cli_starts);
    let exec_p50 = report("dockhand exec(\"echo hi\")", execs);
    report("docker exec echo hi (CLI)", cli_execs);
    report("dockhand exec python one-liner", pys);
    report("docker exec python3 -c (CLI)", cli_pys);
    report("dockhand write+read 1 MiB", files);
    report("docker cp in + out 1 MiB (CLI)", cli_files);
    let close_p50 = report("dockhand close", closes);
    report("docker rm -f (CLI)", cli_closes);
    println!(
        "targets: exec p50 <= 10 ms ({:.2} ms), close <= 500 ms ({:.0} ms)",
        exec_p50.as_secs_f64() * 1e3,
        close_p50.as_secs_f64() * 1e3
    );
    Ok(())
}
