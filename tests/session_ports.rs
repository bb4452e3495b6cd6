//! Ports inside a session, reached from the host over the session agent's
//! channel (the session has no network), against the real daemon: Python's
//! HTTP server with curl, a TCP echo, and a WebSocket echo with the
//! `websockets` client from PyPI.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use dockhand::session::{Session, SessionApi, SessionConfig, SpawnOptions};
use dockhand::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const HTTP: u16 = 8000;
const ECHO: u16 = 9000;
const WS: u16 = 8765;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/ports")
        .join(name)
}

/// Bytes no server could make up: a counter mixed into each byte.
fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i * 31 % 251) as u8 ^ (i >> 12) as u8)
        .collect()
}

/// Waits until something in the session answers on `port`.
async fn listening(s: &Session, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match s.connect(port).await {
            Ok(_) => return,
            Err(Error::PortUnreachable { .. }) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("port {port}: {e}"),
        }
    }
}

async fn with_servers(big: &[u8]) -> Session {
    let client = common::client().await;
    let s = client.session(SessionConfig::new());
    s.start().await.expect("the session starts");
    let servers = std::fs::read(fixture("servers.py")).unwrap();
    s.write_file("servers.py", &servers).await.unwrap();
    s.write_file("site/big.bin", big).await.unwrap();
    s.write_file("site/index.html", b"<h1>inside</h1>\n")
        .await
        .unwrap();
    for command in [
        format!("cd site && exec python3 -m http.server {HTTP} --bind 127.0.0.1"),
        format!("exec python3 servers.py echo {ECHO}"),
        format!("exec python3 servers.py ws {WS}"),
    ] {
        s.spawn(&command, SpawnOptions::new()).await.unwrap();
    }
    for port in [HTTP, ECHO, WS] {
        listening(&s, port).await;
    }
    s
}

fn curl(args: &[&str]) -> std::process::Output {
    std::process::Command::new("curl")
        .args(["-sS", "--max-time", "60"])
        .args(args)
        .output()
        .expect("curl runs")
}

#[tokio::test]
async fn ports_inside_are_reached_from_the_host_without_a_network() {
    let big = pattern(3 << 20);
    let s = with_servers(&big).await;
    let offline = s
        .exec("cat /sys/class/net/*/operstate 2>/dev/null | grep -c up || true")
        .await
        .unwrap();
    assert_eq!(offline.stdout.trim(), "0", "the session has no network");

    // One connection as a stream: 3 MiB (three windows) through it.
    let mut conn = s.connect(HTTP).await.unwrap();
    conn.write_all(b"GET /big.bin HTTP/1.0\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).await.unwrap();
    let body_at = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("headers")
        + 4;
    assert!(answer.starts_with(b"HTTP/1.0 200"));
    assert!(answer[body_at..] == big[..], "the file came through whole");

    // Both ways at once: 4 MiB sent while the echo comes back.
    let sent = pattern(4 << 20);
    let conn = s.connect(ECHO).await.unwrap();
    let (mut from, mut to) = tokio::io::split(conn);
    let writing = {
        let sent = sent.clone();
        tokio::spawn(async move {
            to.write_all(&sent).await.unwrap();
            to.shutdown().await.unwrap();
        })
    };
    let mut echoed = Vec::new();
    from.read_to_end(&mut echoed).await.unwrap();
    writing.await.unwrap();
    assert_eq!(echoed.len(), sent.len());
    assert!(echoed == sent, "the echo is what was sent");

    // A local address for real clients: curl, many at once.
    let exposed = s.expose(HTTP).await.unwrap();
    assert_eq!(exposed.port(), HTTP);
    let url = format!("{}/big.bin", exposed.url());
    let fetched = tokio::task::spawn_blocking(move || curl(&[&url]))
        .await
        .unwrap();
    assert!(fetched.status.success(), "{fetched:?}");
    assert!(fetched.stdout == big, "curl got the file");
    let many: Vec<_> = (0..24)
        .map(|_| {
            let url = format!("{}/index.html", exposed.url());
            tokio::task::spawn_blocking(move || curl(&[&url]))
        })
        .collect();
    for fetched in many {
        let fetched = fetched.await.unwrap();
        assert_eq!(fetched.stdout, b"<h1>inside</h1>\n", "{fetched:?}");
    }

    // A WebSocket, through the real `websockets` client.
    let ws = s.expose(WS).await.unwrap();
    let python = common::venv_python(&["websockets==15.0.1"]);
    let ws_url = format!("ws://{}/", ws.local_addr());
    let out = tokio::process::Command::new(python)
        .arg(fixture("ws_client.py"))
        .arg(ws_url)
        .output()
        .await
        .unwrap();
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(reply["text"], "hello over the agent", "{reply}");
    assert_eq!(reply["binary_same"], true, "{reply}");

    // Nothing listening, and a port that is none, are typed errors.
    match s.connect(9999).await {
        Err(Error::PortUnreachable {
            port: 9999,
            message,
        }) => {
            assert!(message.contains("9999"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        s.connect(0).await,
        Err(Error::InvalidSpec { what: "port", .. })
    ));
    assert!(matches!(
        s.expose(9999).await,
        Err(Error::PortUnreachable { .. })
    ));

    // A dropped exposed port listens no more.
    let address = exposed.local_addr();
    drop(exposed);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(tokio::net::TcpStream::connect(address).await.is_err());

    // Closing the session ends a connection that is open.
    let mut open = s.connect(ECHO).await.unwrap();
    open.write_all(b"x").await.unwrap();
    let mut one = [0u8; 1];
    open.read_exact(&mut one).await.unwrap();
    let id = s.describe().container_id.expect("a container");
    s.close().await.unwrap();
    let mut rest = Vec::new();
    let ended = tokio::time::timeout(Duration::from_secs(10), open.read_to_end(&mut rest)).await;
    assert!(ended.is_ok(), "the connection outlived its session");
    common::wait_gone(&id).await;
}

/// This process's resident memory.
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}

/// A hostile server: it never reads what it is sent and sends without end.
/// The host reads none of it for a while: the agent stops at its window, so
/// the host's memory does not grow with the flood, and the session serves
/// other requests meanwhile; cutting the connection ends it.
#[tokio::test]
async fn a_flooding_server_is_held_to_the_window() {
    let client = common::client().await;
    let s = client.session(SessionConfig::new().memory("256Mi"));
    s.start().await.unwrap();
    s.spawn(
        "exec python3 -c \"import socket\nl = socket.socket(); l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\nl.bind(('127.0.0.1', 7000)); l.listen(8)\nwhile True:\n    c, _ = l.accept()\n    try:\n        while True: c.sendall(b'x' * 65536)\n    except OSError: pass\"",
        SpawnOptions::new(),
    )
    .await
    .unwrap();
    listening(&s, 7000).await;
    let mut flood = s.connect(7000).await.unwrap();
    let mut first = vec![0u8; 65536];
    flood.read_exact(&mut first).await.unwrap();
    let before = resident_bytes();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let grown = resident_bytes().saturating_sub(before);
    // Unheld, 3 s of this flood is hundreds of MiB of lines on the host.
    assert!(grown < 64 << 20, "the host took {grown} bytes of the flood");
    // The session answers while the flood waits on its window.
    let started = Instant::now();
    assert_eq!(s.exec("echo alive").await.unwrap().stdout, "alive\n");
    assert!(started.elapsed() < Duration::from_secs(5));
    // Reading goes on where it stopped: the bytes are all there.
    let mut more = vec![0u8; 8 << 20];
    flood.read_exact(&mut more).await.unwrap();
    assert!(more.iter().all(|b| *b == b'x'));
    drop(flood);
    // The agent cut its side: the server's sends fail, it accepts again.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut again = s.connect(7000).await.unwrap();
    again.read_exact(&mut first).await.unwrap();
    drop(again);
    let id = s.describe().container_id.expect("a container");
    s.close().await.unwrap();
    common::wait_gone(&id).await;
}

/// Bytes through a port are activity: a session that pauses itself when
/// idle stays up while a connection is in use, and pauses once it is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traffic_through_a_port_keeps_an_idle_timer_away() {
    use dockhand::session::PauseMode;
    let client = common::client().await;
    let s = client.session(
        SessionConfig::new().auto_pause(Duration::from_millis(800), PauseMode::Filesystem),
    );
    s.start().await.unwrap();
    let servers = std::fs::read(fixture("servers.py")).unwrap();
    s.write_file("servers.py", &servers).await.unwrap();
    s.spawn(
        &format!("exec python3 servers.py echo {ECHO}"),
        SpawnOptions::new(),
    )
    .await
    .unwrap();
    listening(&s, ECHO).await;
    let mut conn = s.connect(ECHO).await.unwrap();
    let busy_until = Instant::now() + Duration::from_secs(3);
    let mut one = [0u8; 5];
    while Instant::now() < busy_until {
        conn.write_all(b"ping\n").await.unwrap();
        conn.read_exact(&mut one).await.unwrap();
        assert_eq!(&one, b"ping\n");
        assert!(s.paused_mode().is_none(), "paused while in use");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(conn);
    let quiet = Instant::now();
    while s.paused_mode().is_none() {
        assert!(
            quiet.elapsed() < Duration::from_secs(10),
            "never paused once quiet"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let id = s.describe().container_id.expect("a container");
    s.close().await.unwrap();
    common::wait_gone(&id).await;
}
