//! When the process that owns a session, a code host, a kernel, a running one-shot
//! or a session behind an egress policy is SIGKILLed, their containers, volumes
//! and networks (the egress gateway's too) go without anyone calling
//! `reap()`: the programs inside sessions and code hosts exit when the
//! owner's connection (their stdin) closes, and the process's watchdog
//! removes everything else labelled with its session.

mod common;

use std::io::BufRead;
use std::time::{Duration, Instant};

use dockhand::codemode::CodeHostConfig;
use dockhand::session::{SessionApi, SessionConfig};
use dockhand::Sandbox;

const CHILD_ENV: &str = "DOCKHAND_OWNER_DEATH_CHILD";

/// Run as a child process by the test below: starts a session, a code host
/// and a long one-shot, prints their container ids, and waits to be killed.
#[tokio::test]
#[ignore = "run as a child process by the owner-death test"]
async fn owner_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let client = common::client().await;
    let session = client.session(SessionConfig::new());
    session.start().await.expect("session starts");
    let host = client.code_host(CodeHostConfig::default());
    host.start().await.expect("code host starts");
    println!("container {}", session.describe().container_id.unwrap());
    println!("container {}", host.describe().container_id.unwrap());
    let kernel = client.kernel(common::kernel_config());
    kernel.start().await.expect("kernel starts");
    kernel.run("x = 1").await.expect("kernel runs");
    println!(
        "container {}",
        kernel.session().describe().container_id.unwrap()
    );
    // A session behind an egress policy: its network and the gateway too.
    let fenced =
        client.session(SessionConfig::new().network(dockhand::Egress::allow(["api.example.test"])));
    fenced
        .start()
        .await
        .expect("a session with a policy starts");
    println!("container {}", fenced.describe().container_id.unwrap());
    let long = Sandbox::command("owner-death-oneshot", "sleep")
        .args(["600"])
        .build()
        .unwrap();
    let runner = client.clone();
    tokio::spawn(async move { runner.run(&long, Vec::<(String, i64)>::new()).await });
    let pid = std::process::id().to_string();
    let running = |kind: &str| {
        let out = std::process::Command::new("docker")
            .args([
                "ps",
                "-q",
                "--filter",
                &format!("label=dev.dockhand.owner-pid={pid}"),
            ])
            .args(["--filter", &format!("label={kind}")])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let oneshot = loop {
        let (oneshot, watchdog) = (
            running("dev.dockhand.sandbox=owner-death-oneshot"),
            running("dev.dockhand.kind=watchdog"),
        );
        if !oneshot.is_empty() && !watchdog.is_empty() {
            break oneshot;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    println!("container {oneshot}");
    println!("ready");
    tokio::time::sleep(Duration::from_secs(600)).await;
}

#[test]
fn killing_the_owner_removes_its_sessions_code_hosts_and_one_shots() {
    let sockets_before = common::socket_dirs();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["owner_child", "--exact", "--ignored", "--nocapture"])
        .env(CHILD_ENV, "1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("child starts");
    let mut ids = Vec::new();
    let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines {
        let line = line.unwrap();
        if let Some(id) = line.strip_prefix("container ") {
            ids.push(id.to_string());
        }
        if line == "ready" {
            break;
        }
    }
    assert_eq!(ids.len(), 5, "the child started all five");
    let networks_of = |pid: u32| {
        common::docker(&[
            "network",
            "ls",
            "-q",
            "--filter",
            &format!("label=dev.dockhand.owner-pid={pid}"),
        ])
        .lines()
        .count()
    };
    // The fenced session's network, and the ways out made ahead for the next.
    assert!(networks_of(child.id()) >= 1, "the fenced session's network");
    assert!(ids.iter().all(|id| common::container_exists(id)));
    let pid = child.id();
    child.kill().expect("SIGKILL the owner");
    child.wait().unwrap();
    let killed = Instant::now();
    while ids.iter().any(|id| common::container_exists(id))
        && killed.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    let left: Vec<&String> = ids
        .iter()
        .filter(|id| common::container_exists(id))
        .collect();
    assert!(
        left.is_empty(),
        "still there 10 s after the owner died: {left:?}"
    );
    let owned = format!("dev.dockhand.owner-pid={pid}");
    let anything_left = || {
        common::containers_with_label(&owned)
            + volumes(&format!("label={owned}"))
            + networks_of(pid)
    };
    while killed.elapsed() < Duration::from_secs(10) && anything_left() > 0 {
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        anything_left(),
        0,
        "containers (the watchdog's and the egress gateway's included), volumes or networks of the owner left 10 s after it died"
    );
    // Nor on this machine's disk: the code host's socket directory went
    // when its bridge connected, before the owner died.
    let sockets_left = common::new_socket_dirs(&sockets_before);
    assert!(
        sockets_left.is_empty(),
        "the dead owner's socket directories: {sockets_left:?}"
    );
    eprintln!(
        "owner SIGKILLed: its containers were gone after {:?}",
        killed.elapsed()
    );
}

fn volumes(filter: &str) -> usize {
    let out = std::process::Command::new("docker")
        .args(["volume", "ls", "-q", "--filter", filter])
        .output()
        .expect("docker CLI");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

const FORK_CHILD_ENV: &str = "DOCKHAND_OWNER_DEATH_FORK_CHILD";

/// Run as a child process by the test below: starts a session with some
/// files, prints its container id, then forks it and waits to be killed
/// (mid-fork, by then).
#[tokio::test]
#[ignore = "run as a child process by the fork owner-death test"]
async fn owner_fork_child() {
    if std::env::var_os(FORK_CHILD_ENV).is_none() {
        return;
    }
    let client = common::client().await;
    let session = client.session(SessionConfig::new().pausable(true));
    session.start().await.expect("session starts");
    session
        .exec("head -c 50000000 /dev/urandom > state.bin")
        .await
        .expect("files to commit");
    println!("container {}", session.describe().container_id.unwrap());
    println!("forking");
    let forks = session
        .fork(4, dockhand::session::PauseMode::Filesystem)
        .await;
    println!("forked {}", forks.is_ok());
    tokio::time::sleep(Duration::from_secs(600)).await;
}

#[test]
fn killing_the_owner_mid_fork_leaves_no_fork_image() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    for delay in [150u64, 600, 1500] {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["owner_fork_child", "--exact", "--ignored", "--nocapture"])
            .env(FORK_CHILD_ENV, "1")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("child starts");
        let mut parent = String::new();
        let lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        for line in lines {
            let line = line.unwrap();
            if let Some(id) = line.strip_prefix("container ") {
                parent = id.to_string();
            }
            if line == "forking" {
                break;
            }
        }
        assert!(!parent.is_empty(), "the child started its session");
        std::thread::sleep(Duration::from_millis(delay));
        let pid = child.id();
        child.kill().expect("SIGKILL the owner");
        child.wait().unwrap();
        let killed = Instant::now();
        let made_from_parent = || {
            common::docker(&[
                "images",
                "-q",
                "--filter",
                &format!("label=dev.dockhand.snapshot-of={parent}"),
            ])
            .lines()
            .count()
        };
        let owned = format!("dev.dockhand.owner-pid={pid}");
        let left = || made_from_parent() + common::containers_with_label(&owned);
        // The watchdog's sweeps take what had landed by then.
        while killed.elapsed() < Duration::from_secs(15) && left() > 0 {
            std::thread::sleep(Duration::from_millis(250));
        }
        // A commit the daemon finished after them is a later process's
        // `reap` to remove (it carries its dead owner's labels).
        if left() > 0 {
            let reaped = runtime.block_on(async {
                let client = common::client().await;
                client.reap().await.expect("reap")
            });
            eprintln!("{delay} ms: reap removed {reaped:?}");
        }
        assert_eq!(
            (made_from_parent(), common::containers_with_label(&owned)),
            (0, 0),
            "killed {delay} ms into a fork: fork images or containers left"
        );
        eprintln!(
            "killed {delay} ms into a fork: nothing left after {:?}",
            killed.elapsed()
        );
    }
}
