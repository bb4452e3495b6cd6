//! What the egress tests share: a probe program that fetches, resolves and
//! connects from inside a sandbox, a client whose gateway reaches the test
//! servers, and the checks that nothing of the gateway is left.
#![allow(dead_code)] // each egress test binary uses its own part

use std::time::{Duration, Instant};

use dockhand::{Client, Egress, ImageSpec, Sandbox, Type};
use serde_json::Value;

use super::common;
use super::egress_servers::TestServers;

/// Fetches `url` (through the proxy, or straight to the address DNS gives
/// when `proxy` is off); the outcome as a dict.
pub const PROBE: &str = r#"
import json, socket, time, urllib.request, urllib.error
def fetch(url, proxy=True, headers=None):
    opener = urllib.request.build_opener() if proxy else urllib.request.build_opener(urllib.request.ProxyHandler({}))
    started = time.time()
    try:
        with opener.open(urllib.request.Request(url, headers=headers or {}), timeout=10) as r:
            return {"status": r.status, "body": json.loads(r.read()), "secs": time.time() - started}
    except urllib.error.HTTPError as e:
        return {"status": e.code, "text": e.read().decode(errors="replace"), "secs": time.time() - started}
    except Exception as e:
        return {"error": type(e).__name__ + ": " + str(e), "secs": time.time() - started}
def resolve(name):
    started = time.time()
    try:
        return {"addresses": sorted({a[4][0] for a in socket.getaddrinfo(name, 80)}), "secs": time.time() - started}
    except Exception as e:
        return {"error": type(e).__name__ + ": " + str(e), "secs": time.time() - started}
def raw(address, port):
    started = time.time()
    try:
        socket.create_connection((address, port), timeout=5).close()
        return {"connected": True, "secs": time.time() - started}
    except Exception as e:
        return {"error": type(e).__name__ + ": " + str(e), "secs": time.time() - started}
"#;

/// The tests run one at a time: each checks that the gateway and networks of
/// this process are gone when its last sandbox is.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub async fn setup() -> (Client, TestServers) {
    let base = common::client().await;
    let image = base
        .resolve_image(&ImageSpec::default())
        .await
        .expect("the base image");
    let servers = TestServers::start(&image.reference);
    let client = Client::builder()
        .egress_network(&servers.network)
        .egress_trust(&servers.ca_pem)
        .connect()
        .await
        .expect("a client");
    (client, servers)
}

pub async fn probe(client: &Client, policy: Egress, server: &str, body: &str) -> Value {
    probe_with(client, policy, server, "", body).await
}

/// [`probe`] with more Python (`helpers`) defined before `body` runs.
pub async fn probe_with(
    client: &Client,
    policy: Egress,
    server: &str,
    helpers: &str,
    body: &str,
) -> Value {
    let code = format!("{PROBE}\n{helpers}\nresult = json.dumps({body})");
    let sandbox = Sandbox::code("egress-probe", code)
        .input("server", Type::Str)
        .output("result", Type::Str)
        .network(policy)
        .timeout(Duration::from_secs(120))
        .build()
        .expect("a sandbox");
    let out = client
        .run(&sandbox, [("server", server)])
        .await
        .expect("the probe runs");
    serde_json::from_str(&out.get::<String>("result").expect("a result")).expect("json")
}

pub fn status(v: &Value) -> i64 {
    v["status"]
        .as_i64()
        .unwrap_or_else(|| panic!("no status: {v}"))
}

fn networks() -> usize {
    common::docker(&[
        "network",
        "ls",
        "-q",
        "--filter",
        "label=dev.dockhand.kind=egress-network",
        "--filter",
        &format!("label=dev.dockhand.owner-pid={}", std::process::id()),
    ])
    .lines()
    .count()
}

/// The gateway goes with its last sandbox, and every sandbox's network with it.
pub async fn assert_nothing_left() {
    let since = Instant::now();
    while (networks() > 0 || gateway_of_this_process() > 0)
        && since.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(networks(), 0, "egress networks left");
    assert_eq!(
        gateway_of_this_process(),
        0,
        "the gateway outlived its last sandbox"
    );
}

/// A sandbox with `policy` reaches the test API: the next sandbox after a
/// gateway died gets a new one.
pub async fn assert_reaches_the_api(client: &Client, policy: Egress, servers: &TestServers) {
    let r = probe(
        client,
        policy,
        &servers.address,
        r#"{"fetch": fetch("http://api.example.test/")}"#,
    )
    .await;
    assert_eq!(status(&r["fetch"]), 200, "{}", r["fetch"]);
}

/// The id of this process's gateway container, once one runs (within 60 s).
pub async fn the_gateway() -> String {
    let since = Instant::now();
    loop {
        let found = common::docker(&[
            "ps",
            "-q",
            "--filter",
            "label=dev.dockhand.kind=egress-gateway",
            "--filter",
            &format!("label=dev.dockhand.owner-pid={}", std::process::id()),
        ]);
        let found = found.trim();
        if !found.is_empty() {
            assert_eq!(found.lines().count(), 1, "one gateway: {found}");
            return found.to_string();
        }
        assert!(since.elapsed() < Duration::from_secs(60), "no gateway runs");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn gateway_of_this_process() -> usize {
    let out = common::docker(&[
        "ps",
        "-aq",
        "--filter",
        "label=dev.dockhand.kind=egress-gateway",
        "--filter",
        &format!("label=dev.dockhand.owner-pid={}", std::process::id()),
    ]);
    out.lines().count()
}

pub fn sha256_hex(text: &str) -> String {
    let out = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child.stdin.take().unwrap().write_all(text.as_bytes())?;
            child.wait_with_output()
        })
        .expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}
