//! When the process that owns a session or a code host is SIGKILLed, their
//! containers go without anyone calling `reap()`: the programs inside exit
//! when the owner's connection (their stdin) closes, and the daemon removes
//! the containers.

mod common;

use std::io::BufRead;
use std::time::{Duration, Instant};

use dockhand::codemode::CodeHostConfig;
use dockhand::session::SessionConfig;

const CHILD_ENV: &str = "DOCKHAND_OWNER_DEATH_CHILD";

/// Run as a child process by the test below: starts a session and a code
/// host, prints their container ids, and waits to be killed.
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
    println!("ready");
    tokio::time::sleep(Duration::from_secs(600)).await;
}

#[test]
fn killing_the_owner_removes_its_sessions_and_code_hosts() {
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
    assert_eq!(ids.len(), 2, "the child started both");
    assert!(ids.iter().all(|id| common::container_exists(id)));
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
    eprintln!(
        "owner SIGKILLed: its containers were gone after {:?}",
        killed.elapsed()
    );
}
