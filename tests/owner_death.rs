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
use dockhand::session::SessionConfig;
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
