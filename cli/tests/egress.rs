//! `--allow-host`, `--deny-host` and host-bound `--secret`s from the command
//! line and through `dockhand mcp`, against test servers on a network of the
//! test's own (the gateway is pointed there with `DOCKHAND_EGRESS_NETWORK`,
//! and trusts their CA through `DOCKHAND_EGRESS_CA`).

mod common;
#[path = "../../tests/common/egress_servers.rs"]
mod egress_servers;

use common::{body, call, dockhand, failed};
use egress_servers::TestServers;
use serde_json::json;

const FETCH: &str = r#"
import hashlib, os, urllib.request, urllib.error
def get(url, **headers):
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return "%s %s" % (r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        return "%s denied" % e.code
"#;

/// The test servers, on the base image the command makes.
fn servers(dir: &std::path::Path) -> (TestServers, std::path::PathBuf) {
    dockhand()
        .args(["run", "-c", "print(1)"])
        .assert()
        .success();
    let out = std::process::Command::new("docker")
        .args([
            "images",
            "-q",
            "--filter",
            "label=dev.dockhand.kind=base-image",
        ])
        .output()
        .expect("docker CLI");
    let image = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .expect("a base image")
        .to_string();
    let servers = TestServers::start(&image);
    let ca = dir.join("test-ca.pem");
    std::fs::write(&ca, &servers.ca_pem).unwrap();
    (servers, ca)
}

#[test]
fn run_reaches_allowed_hosts_only_and_the_secret_stays_outside() {
    let dir = tempfile::tempdir().unwrap();
    let (servers, ca) = servers(dir.path());
    let code = format!(
        "{FETCH}\nprint('key', os.environ['KEY'][:21])\n\
         print('api', get('https://api.example.test/', Authorization='Bearer ' + os.environ['KEY']))\n\
         print('other', get('http://other.example.test/'))"
    );
    let out = dockhand()
        .env("DOCKHAND_EGRESS_NETWORK", &servers.network)
        .env("DOCKHAND_EGRESS_CA", &ca)
        .env("EGRESS_TEST_KEY", "real-key-from-host-5a7")
        .args([
            "run",
            "--allow-host",
            "api.example.test",
            "--deny-host",
            "10.0.0.0/8",
        ])
        .args([
            "--secret",
            "KEY=env:EGRESS_TEST_KEY@api.example.test",
            "-c",
            &code,
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains("key dockhand-placeholder"), "{text}");
    assert!(!text.contains("real-key-from-host"), "{text}");
    let api = text
        .lines()
        .find(|l| l.starts_with("api "))
        .expect("api line");
    assert!(api.starts_with("api 200"), "{text}");
    let sent: serde_json::Value = serde_json::from_str(api.trim_start_matches("api 200 ")).unwrap();
    assert_eq!(
        sent["auth_sha256"],
        sha256_hex("Bearer real-key-from-host-5a7")
    );
    assert!(text.contains("other 403 denied"), "{text}");
    // Bad entries are said before anything runs.
    dockhand()
        .args(["run", "--allow-host", "bad host", "-c", "print(1)"])
        .assert()
        .failure()
        .stderr(predicates::str::contains("bad host"));
    dockhand()
        .args(["run", "--deny-host", "x.test", "-c", "print(1)"])
        .assert()
        .failure()
        .stderr(predicates::str::contains("--allow-host"));
}

#[tokio::test]
async fn mcp_tools_follow_the_servers_policy_and_never_widen_it() {
    let dir = tempfile::tempdir().unwrap();
    let (servers, ca) = servers(dir.path());
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_dockhand"));
    command
        .env("DOCKHAND_EGRESS_NETWORK", &servers.network)
        .env("DOCKHAND_EGRESS_CA", &ca)
        .args([
            "mcp",
            "--allow-host",
            "api.example.test",
            "--allow-host",
            "other.example.test",
        ]);
    let client = common::mcp_client_of(command).await;
    let code = |url: &str| format!("{FETCH}\nprint(get('{url}'))");
    let ran = call(
        &client,
        "run_python",
        json!({"code": code("http://api.example.test/")}),
    )
    .await;
    assert!(!failed(&ran), "{ran:?}");
    assert!(
        body(&ran)["stdout"].as_str().unwrap().starts_with("200"),
        "{ran:?}"
    );
    let narrowed = call(
        &client,
        "run_python",
        json!({"code": code("http://api.example.test/"), "allow_hosts": ["other.example.test"]}),
    )
    .await;
    assert!(
        body(&narrowed)["stdout"]
            .as_str()
            .unwrap()
            .starts_with("403"),
        "{narrowed:?}"
    );
    let widened = call(
        &client,
        "run_python",
        json!({"code": "print(1)", "allow_hosts": ["evil.example.test"]}),
    )
    .await;
    assert!(failed(&widened), "{widened:?}");
    assert!(body(&widened)
        .to_string()
        .contains("not among the hosts this server allows"));
    let shell = call(
        &client,
        "shell",
        json!({"command": format!("python3 -c \"{}\"", "import urllib.request as u\ntry: u.urlopen('http://blocked.example.test/', timeout=10)\nexcept Exception as e: print(e)")}),
    )
    .await;
    assert!(
        body(&shell)["stdout"]
            .as_str()
            .unwrap_or("")
            .contains("403"),
        "{shell:?}"
    );
    client.cancel().await.expect("the client closes");
}

fn sha256_hex(text: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sha256sum");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}
