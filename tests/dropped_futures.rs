//! Dropping any future of the SDK (a caller's `timeout`, a `select!` that
//! went the other way) returns at once; the cleanup goes on in the
//! background and still leaves nothing behind.

mod common;

use std::future::Future;
use std::time::{Duration, Instant};

use dockhand::codemode::{CodeHostConfig, Tool, Toolset};
use dockhand::pool::PoolConfig;
use dockhand::session::{SessionApi as _, SessionConfig};
use dockhand::{CacheMode, Sandbox, Type};

/// The most a drop may take.
const DROP_LIMIT: Duration = Duration::from_millis(5);

/// Deadlines that land at every stage: before the create, while the
/// container is created or started, while the code runs.
fn deadline(i: usize) -> Duration {
    [1, 1, 5, 20, 60, 120, 250][i % 7] * Duration::from_millis(1)
}

/// What this thread has used so far: CPU time, and how often it gave the
/// CPU up to wait (voluntary switches) or was preempted (involuntary).
#[derive(Clone, Copy)]
struct ThreadClock {
    cpu: Duration,
    waits: i64,
    preempted: i64,
}

impl ThreadClock {
    fn now() -> Self {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: both calls only write into the structs passed.
        unsafe {
            libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t);
            libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
        }
        ThreadClock {
            cpu: Duration::new(t.tv_sec as u64, t.tv_nsec as u32),
            waits: usage.ru_nvcsw,
            preempted: usage.ru_nivcsw,
        }
    }
}

/// One dropped future: wall time of the drop, and the thread's use meanwhile.
struct Dropped {
    wall: Duration,
    cpu: Duration,
    waits: i64,
    preempted: i64,
}

/// The drops of one kind of future.
struct Drops {
    what: &'static str,
    drops: Vec<Dropped>,
}

impl Drops {
    fn new(what: &'static str) -> Self {
        Drops {
            what,
            drops: Vec::new(),
        }
    }

    /// Polls `future` until `deadline`, then drops it and records the drop.
    async fn drop_at<F: Future>(&mut self, future: F, deadline: Duration) {
        let mut future = Box::pin(future);
        tokio::select! {
            _ = &mut future => {}
            () = tokio::time::sleep(deadline) => {
                let before = ThreadClock::now();
                let started = Instant::now();
                drop(future);
                let wall = started.elapsed();
                let after = ThreadClock::now();
                self.drops.push(Dropped {
                    wall,
                    cpu: after.cpu - before.cpu,
                    waits: after.waits - before.waits,
                    preempted: after.preempted - before.preempted,
                });
            }
        }
    }

    /// Every drop did at most [`DROP_LIMIT`] of work, and one that was not
    /// preempted (2 busy cores: the daemon and the containers compete for
    /// them) returned within the limit: nothing in a drop waits.
    fn check(self, at_least: usize) {
        let what = self.what;
        assert!(
            self.drops.len() >= at_least,
            "{what}: only {} of the futures were dropped",
            self.drops.len()
        );
        let mut walls: Vec<Duration> = self.drops.iter().map(|d| d.wall).collect();
        walls.sort();
        let p = |q: f64| walls[((walls.len() - 1) as f64 * q) as usize];
        let waits: i64 = self.drops.iter().map(|d| d.waits).sum();
        eprintln!(
            "{what}: {} drops, wall p50 {:?} p99 {:?} max {:?}; {waits} waits",
            walls.len(),
            p(0.5),
            p(0.99),
            p(1.0)
        );
        for d in &self.drops {
            assert!(d.cpu <= DROP_LIMIT, "{what}: a drop worked {:?}", d.cpu);
            assert!(
                d.preempted > 0 || d.wall <= DROP_LIMIT,
                "{what}: a drop took {:?} ({} waits)",
                d.wall,
                d.waits
            );
        }
    }
}

/// Waits up to 20 s for no container of this process but its watchdog.
async fn nothing_left() {
    let pid = std::process::id();
    let count = || {
        let out = std::process::Command::new("docker")
            .args(["ps", "-a", "--format", "{{.Label \"dev.dockhand.kind\"}}"])
            .args(["--filter", &format!("label=dev.dockhand.owner-pid={pid}")])
            .output()
            .expect("docker CLI");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|kind| *kind != "watchdog")
            .count()
    };
    for _ in 0..100 {
        if count() == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{} containers of this process were left behind", count());
}

fn double() -> Sandbox {
    Sandbox::code("dropped-double", "import time\ntime.sleep(0.1)\ny = x * 2")
        .input("x", Type::Int)
        .output("y", Type::Int)
        .cache(CacheMode::Disable)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_runs_return_at_once_and_leave_nothing() {
    let client = common::client().await;
    let job = double();
    // The image first: a drop during a build is not what is measured.
    assert_eq!(
        client
            .run(&job, [("x", 1)])
            .await
            .unwrap()
            .get::<i64>("y")
            .unwrap(),
        2
    );
    let mut cold = Drops::new("cold run");
    for i in 0..100 {
        cold.drop_at(client.run(&job, [("x", i as i64)]), deadline(i))
            .await;
    }
    cold.check(90);

    let pool = client.pool(&job, PoolConfig::new(4)).await.unwrap();
    pool.wait_ready(Duration::from_secs(60)).await;
    let mut pooled = Drops::new("pooled run");
    for i in 0..40 {
        pooled
            .drop_at(pool.run([("x", i as i64)]), deadline(i))
            .await;
    }
    pooled.check(30);
    pool.shutdown().await;
    nothing_left().await;
    // The next run is unaffected.
    let out = client.run(&job, [("x", 21)]).await.unwrap();
    assert_eq!(out.get::<i64>("y").unwrap(), 42);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_session_and_code_host_calls_return_at_once() {
    let client = common::client().await;
    let mut starts = Drops::new("session start");
    for i in 0..14 {
        let session = client.session(SessionConfig::new());
        starts.drop_at(session.start(), deadline(i) * 2).await;
    }
    starts.check(10);
    let session = client.session(SessionConfig::new());
    session.start().await.unwrap();
    let mut execs = Drops::new("session exec");
    for i in 0..30 {
        execs.drop_at(session.exec("sleep 5"), deadline(i)).await;
    }
    execs.check(30);
    assert_eq!(session.exec("echo alive").await.unwrap().stdout, "alive\n");
    session.close().await.unwrap();

    let mut host_starts = Drops::new("code host start");
    for i in 0..14 {
        let host = client.code_host(CodeHostConfig::default());
        host_starts.drop_at(host.start(), deadline(i) * 2).await;
    }
    host_starts.check(10);
    let host = client.code_host(CodeHostConfig::default());
    host.start().await.unwrap();
    let mut executes = Drops::new("code host execute");
    // A tool that takes its time on the host: the execution waits in it.
    let tools = Toolset::new().tool(Tool::new("wait", "Waits 5 s.").handler(|_| async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok(serde_json::json!(null))
    }));
    for i in 0..30 {
        executes
            .drop_at(
                host.execute("wait()", serde_json::json!({}), &tools),
                deadline(i),
            )
            .await;
    }
    executes.check(30);
    let run = host
        .execute("x * 2", serde_json::json!({"x": 21}), &tools)
        .await
        .unwrap();
    assert_eq!(run.value, serde_json::json!(42));
    host.close().await.unwrap();
    nothing_left().await;
}

/// A large write dropped while its request is still going out (a client
/// that hangs up mid-upload) leaves the session's channel whole: the next
/// request is answered at once, and a streamed write dropped midway leaves
/// neither the file nor its temporary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_dropped_mid_request_leaves_the_session_usable() {
    let client = common::client().await;
    let session = client.session(SessionConfig::new());
    session.start().await.unwrap();
    let big = vec![b'x'; 48 << 20];
    for wait in [1, 5, 20] {
        let _ = tokio::time::timeout(
            Duration::from_millis(wait),
            session.write_file("big.bin", &big),
        )
        .await;
        let started = Instant::now();
        let out = tokio::time::timeout(Duration::from_secs(20), session.exec("echo fine"))
            .await
            .expect("answered")
            .expect("the session still works");
        assert_eq!(out.stdout.trim(), "fine");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }
    // Whole, into directories that did not exist, in pieces of any size.
    let sizes = [1, 3 << 20, 7, 1 << 20, 0, 5];
    let pieces = futures::stream::iter(
        sizes.map(|n| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b'z'; n]))),
    );
    let written = session
        .write_file_from("new/dirs/whole.bin", pieces, 1 << 30)
        .await
        .unwrap();
    assert_eq!(written, sizes.iter().sum::<usize>() as u64);
    let counted = session
        .exec("wc -c < new/dirs/whole.bin; tr -d z < new/dirs/whole.bin | wc -c")
        .await
        .unwrap();
    assert_eq!(
        counted.stdout.split_whitespace().collect::<Vec<_>>(),
        [written.to_string().as_str(), "0"]
    );
    // Dropped midway: neither the file nor its temporary stays.
    let pieces = futures::stream::iter(
        (0..64).map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b'y'; 1 << 20]))),
    );
    let _ = tokio::time::timeout(
        Duration::from_millis(300),
        session.write_file_from("streamed.bin", pieces, 1 << 30),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let listed = session.exec("ls -a").await.unwrap().stdout;
    assert!(
        !listed.contains("streamed.bin") && !listed.contains("dockhand-upload"),
        "{listed}"
    );
    session.close().await.unwrap();
}

/// The networks this process owns (egress ways out, made ahead or leased).
fn own_networks() -> usize {
    let out = std::process::Command::new("docker")
        .args(["network", "ls", "-q", "--filter"])
        .arg(format!(
            "label=dev.dockhand.owner-pid={}",
            std::process::id()
        ))
        .output()
        .expect("docker CLI");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

/// Starts of sessions behind an allow-list dropped at every stage (the
/// gateway's network being created, connected, the holder started, the
/// session's container made): once the last is gone, so is every network
/// (the gateway goes with its last sandbox, its ways out with it), while
/// this process lives on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_egress_starts_leave_no_network() {
    let client = common::client().await;
    let config = || SessionConfig::new().network(dockhand::Egress::allow(["api.example.test"]));
    // One start that finishes first: the gateway's image is made.
    let first = client.session(config());
    first.start().await.unwrap();
    first.close().await.unwrap();
    for after in [1u64, 5, 20, 60, 120, 250, 400, 600, 900, 1500] {
        let s = client.session(config());
        let _ = tokio::time::timeout(Duration::from_millis(after), s.start()).await;
        drop(s);
    }
    let started = Instant::now();
    while own_networks() > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "{} networks of this process left behind",
            own_networks()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    eprintln!(
        "dropped egress starts: no network left {:?} after the last",
        started.elapsed()
    );
}
