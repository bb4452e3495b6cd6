//! Egress allow-lists through dockhand's gateway, against test servers on
//! a network of the test's own (nothing leaves the machine): allowed names
//! and addresses work through the proxy and transparently; denied ones fail
//! fast with a clear answer; raw sockets and DNS reach nothing off the list;
//! a secret bound to a host is swapped in for that host only; a live
//! session's policy changes; and the gateway goes with its last sandbox.

mod common;
#[path = "common/egress_probe.rs"]
mod egress_probe;
#[path = "common/egress_servers.rs"]
mod egress_servers;

use std::time::Duration;

use dockhand::session::{SessionApi, SessionConfig};
use dockhand::{Egress, Sandbox, Secret, Type};
use egress_probe::{
    assert_nothing_left, assert_reaches_the_api, gateway_of_this_process, probe, setup, sha256_hex,
    status, the_gateway, PROBE, SERIAL,
};
use serde_json::Value;

#[tokio::test]
async fn allowed_hosts_work_and_everything_else_is_closed() {
    let _serial = SERIAL.lock().await;
    let (client, servers) = setup().await;
    let policy = Egress::allow(["api.example.test"]);
    let r = probe(
        &client,
        policy,
        &servers.address,
        r#"{
        "http_proxy": fetch("http://api.example.test/x"),
        "https_proxy": fetch("https://api.example.test/y"),
        "http_direct": fetch("http://api.example.test/z", proxy=False),
        "https_direct": fetch("https://api.example.test/w", proxy=False),
        "denied_proxy": fetch("http://other.example.test/"),
        "denied_https_proxy": fetch("https://other.example.test/"),
        "denied_direct": fetch("https://other.example.test/", proxy=False),
        "dns_listed": resolve("api.example.test"),
        "dns_unlisted": resolve("other.example.test"),
        "dns_outside": resolve("example.com"),
        "raw_server": raw(server, 80),
        "raw_outside": raw("192.0.2.1", 443),
        "raw_host": raw("172.17.0.1", 22),
        "raw_bridge": raw(socket.inet_ntoa(bytes.fromhex(open("/proc/net/route").read().split("\n")[1].split()[2])[::-1]), 53),
    }"#,
    )
    .await;
    for (key, tls) in [
        ("http_proxy", false),
        ("https_proxy", true),
        ("http_direct", false),
        ("https_direct", true),
    ] {
        assert_eq!(status(&r[key]), 200, "{key}: {}", r[key]);
        assert_eq!(r[key]["body"]["tls"], tls, "{key}: {}", r[key]);
        assert_eq!(
            r[key]["body"]["host"], "api.example.test",
            "{key}: {}",
            r[key]
        );
    }
    // Denied through the proxy: 403 at once, saying why.
    assert_eq!(status(&r["denied_proxy"]), 403, "{}", r["denied_proxy"]);
    assert!(
        r["denied_proxy"]["text"]
            .as_str()
            .unwrap()
            .contains("not allowed by this sandbox's network policy"),
        "{}",
        r["denied_proxy"]
    );
    assert!(
        r["denied_https_proxy"]["error"]
            .as_str()
            .unwrap_or("")
            .contains("403"),
        "{}",
        r["denied_https_proxy"]
    );
    // Off the list, DNS knows no such name: fails fast, nothing asked upstream.
    for key in ["denied_direct", "dns_unlisted", "dns_outside"] {
        assert!(r[key]["error"].is_string(), "{key} must fail: {}", r[key]);
        assert!(
            r[key]["secs"].as_f64().unwrap() < 2.0,
            "{key} must fail fast: {}",
            r[key]
        );
    }
    // A listed name resolves to the gateway, not to the server.
    let listed = r["dns_listed"]["addresses"].as_array().expect("addresses");
    assert_eq!(listed.len(), 1, "{}", r["dns_listed"]);
    assert_ne!(listed[0], servers.address.as_str());
    // No route anywhere but the gateway: not to the server, not outside,
    // not to the host (through docker0 or this network's bridge). The
    // kernel says so once its neighbour lookup gives up (3 s).
    for key in ["raw_server", "raw_outside", "raw_host", "raw_bridge"] {
        let error = r[key]["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{key} must fail: {}", r[key]));
        assert!(error.contains("No route to host"), "{key}: {}", r[key]);
        assert!(
            r[key]["secs"].as_f64().unwrap() < 4.5,
            "{key} must not hang: {}",
            r[key]
        );
    }
    // Addresses, wildcards and deny-wins.
    let address = servers.address.clone();
    let r = probe(
        &client,
        Egress::allow([address.as_str(), "*.example.test"]).deny(["blocked.example.test"]),
        &servers.address,
        r#"{
        "by_address": fetch("http://%s/a" % server),
        "wildcard": fetch("http://other.example.test/b"),
        "denied": fetch("http://blocked.example.test/c"),
        "denied_dns": resolve("blocked.example.test"),
    }"#,
    )
    .await;
    assert_eq!(status(&r["by_address"]), 200, "{}", r["by_address"]);
    assert_eq!(status(&r["wildcard"]), 200, "{}", r["wildcard"]);
    assert_eq!(status(&r["denied"]), 403, "{}", r["denied"]);
    assert!(r["denied_dns"]["error"].is_string(), "{}", r["denied_dns"]);
    drop(client);
    assert_nothing_left().await;
}

#[tokio::test]
async fn a_secret_bound_to_a_host_is_swapped_in_for_that_host_only() {
    let _serial = SERIAL.lock().await;
    let (client, _servers) = setup().await;
    const REAL: &str = "sk-test-real-value-8c1f2e";
    let code = format!(
        "{PROBE}\nimport hashlib, os\nkey = os.environ['API_KEY']\nauth = {{'Authorization': 'Bearer ' + key}}\n\
         result = json.dumps({{'env': key, 'to_api': fetch('https://api.example.test/', headers=auth),\n\
         'to_api_direct': fetch('https://api.example.test/', proxy=False, headers=auth),\n\
         'to_other': fetch('https://other.example.test/', headers=auth),\n\
         'to_api_http': fetch('http://api.example.test/', headers=auth),\n\
         'placeholder_sha': hashlib.sha256(('Bearer ' + key).encode()).hexdigest(),\n\
         'environ': ' '.join(os.environ.values())}})"
    );
    let sandbox = Sandbox::code("egress-secret", code)
        .output("result", Type::Str)
        .network(Egress::allow(["*.example.test"]))
        .secret(Secret::for_hosts("API_KEY", REAL, ["api.example.test"]))
        .timeout(Duration::from_secs(120))
        .build()
        .expect("a sandbox");
    assert!(!format!("{sandbox:?}").contains(REAL));
    let out = client
        .run(&sandbox, Vec::<(String, i64)>::new())
        .await
        .expect("runs");
    let text = out.get::<String>("result").expect("result");
    assert!(
        !text.contains(REAL),
        "the value reached the sandbox: {text}"
    );
    let r: Value = serde_json::from_str(&text).unwrap();
    let placeholder = r["env"].as_str().unwrap();
    assert!(
        placeholder.starts_with("dockhand-placeholder-"),
        "{placeholder}"
    );
    assert!(!r["environ"].as_str().unwrap().contains(REAL));
    let real_sha = sha256_hex(&format!("Bearer {REAL}"));
    for key in ["to_api", "to_api_direct", "to_api_http"] {
        assert_eq!(status(&r[key]), 200, "{key}: {}", r[key]);
        assert_eq!(
            r[key]["body"]["auth_sha256"],
            real_sha.as_str(),
            "{key}: the server got the value"
        );
    }
    assert_eq!(status(&r["to_other"]), 200, "{}", r["to_other"]);
    assert_eq!(
        r["to_other"]["body"]["auth_sha256"], r["placeholder_sha"],
        "another host gets the useless placeholder"
    );
    // A secret bound to hosts without a policy is refused before anything runs.
    let refused = Sandbox::code("egress-secret-offline", "print(1)")
        .secret(Secret::for_hosts("API_KEY", REAL, ["api.example.test"]))
        .build()
        .expect_err("needs a policy")
        .to_string();
    assert!(
        refused.contains("egress policy") && !refused.contains(REAL),
        "{refused}"
    );
    drop(client);
    assert_nothing_left().await;
}

#[tokio::test]
async fn a_live_sessions_policy_changes_and_the_gateway_goes_with_it() {
    let _serial = SERIAL.lock().await;
    let (client, _servers) = setup().await;
    let session = client.session(SessionConfig::new().network(Egress::allow(["api.example.test"])));
    session.start().await.expect("starts");
    let fetch = |host: &str| {
        format!("python3 -c \"import urllib.request as u\ntry:\n print(u.urlopen('http://{host}/', timeout=10).status)\nexcept Exception as e:\n print('failed', e)\"")
    };
    let before = session
        .exec(&fetch("other.example.test"))
        .await
        .expect("exec");
    assert!(
        before.stdout.contains("failed") && before.stdout.contains("403"),
        "{}",
        before.stdout
    );
    assert!(session
        .exec(&fetch("api.example.test"))
        .await
        .unwrap()
        .stdout
        .contains("200"));
    session
        .set_network(Egress::allow(["other.example.test"]))
        .await
        .expect("the policy changes");
    let after = session
        .exec(&fetch("other.example.test"))
        .await
        .expect("exec");
    assert!(after.stdout.contains("200"), "{}", after.stdout);
    let api = session
        .exec(&fetch("api.example.test"))
        .await
        .expect("exec");
    assert!(api.stdout.contains("403"), "{}", api.stdout);
    assert!(session
        .set_network(Egress::allow(["bad host"]))
        .await
        .is_err());
    assert_eq!(
        gateway_of_this_process(),
        1,
        "one gateway while the session runs"
    );
    session.close().await.expect("closes");
    // A session started without a policy cannot be given one.
    let offline = client.session(SessionConfig::new());
    offline.start().await.expect("starts");
    let e = offline
        .set_network(Egress::allow(["api.example.test"]))
        .await
        .expect_err("refused");
    assert!(
        e.to_string()
            .contains("did not start with an egress policy"),
        "{e}"
    );
    offline.close().await.unwrap();
    drop(client);
    assert_nothing_left().await;
}

#[tokio::test]
async fn a_sandbox_hoarding_connections_cannot_starve_another() {
    let _serial = SERIAL.lock().await;
    let (client, servers) = setup().await;
    // Opens 2000 connections to the gateway and holds them; reports how many
    // the gateway kept open.
    let hoard = r#"
import socket, time
gateway = socket.gethostbyname("api.example.test")
held = []
for _ in range(2000):
    try:
        held.append(socket.create_connection((gateway, 80), timeout=5))
    except OSError:
        break
time.sleep(8)
open_ = 0
for s in held:
    s.setblocking(False)
    try:
        open_ += s.recv(1) != b""
    except BlockingIOError:
        open_ += 1
    except OSError:
        pass
result = "%d %d" % (len(held), open_)
"#;
    let hoarder = Sandbox::code("egress-hoarder", hoard)
        .output("result", Type::Str)
        .network(Egress::allow(["api.example.test"]))
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let running = {
        let client = client.clone();
        tokio::spawn(async move { client.run(&hoarder, Vec::<(String, i64)>::new()).await })
    };
    tokio::time::sleep(Duration::from_secs(4)).await;
    let r = probe(
        &client,
        Egress::allow(["api.example.test"]),
        &servers.address,
        r#"{"fetch": fetch("http://api.example.test/")}"#,
    )
    .await;
    assert_eq!(
        status(&r["fetch"]),
        200,
        "another sandbox still gets through: {}",
        r["fetch"]
    );
    let out = running.await.unwrap().expect("the hoarder runs");
    let text = out.get::<String>("result").unwrap();
    let (made, open) = text.split_once(' ').unwrap();
    let (made, open): (usize, usize) = (made.parse().unwrap(), open.parse().unwrap());
    assert!(made > 512, "{text}");
    assert!(
        open <= 512,
        "the gateway kept {open} of {made} connections open"
    );
    // And the next run of the hoarder's kind is unaffected.
    let again = probe(
        &client,
        Egress::allow(["api.example.test"]),
        &servers.address,
        r#"{"fetch": fetch("http://api.example.test/")}"#,
    )
    .await;
    assert_eq!(status(&again["fetch"]), 200);
    drop(client);
    assert_nothing_left().await;
}

#[tokio::test]
async fn when_the_gateway_dies_sandboxes_reach_nothing_and_the_next_gets_a_new_one() {
    let _serial = SERIAL.lock().await;
    let (client, servers) = setup().await;
    let policy = Egress::allow(["api.example.test"]);
    let session = client.session(SessionConfig::new().network(policy.clone()));
    session.start().await.expect("starts");
    let fetch = "python3 -c \"import urllib.request as u\ntry:\n print(u.urlopen('http://api.example.test/', timeout=5).status)\nexcept Exception as e:\n print('failed', e)\"";
    assert!(session.exec(fetch).await.unwrap().stdout.contains("200"));
    let gateway = the_gateway().await;
    common::docker(&["kill", &gateway]);
    // Fail closed: nothing answers, neither the proxy nor DNS, and no route
    // goes anywhere else.
    let after = session.exec(fetch).await.expect("exec");
    assert!(
        after.stdout.contains("failed") && !after.stdout.contains("200"),
        "{}",
        after.stdout
    );
    let e = session
        .set_network(Egress::allow(["other.example.test"]))
        .await
        .expect_err("the gateway is gone");
    assert!(matches!(e, dockhand::Error::EgressGateway { .. }), "{e}");
    session.close().await.expect("closes");
    // The next sandbox gets a new gateway.
    assert_reaches_the_api(&client, policy, &servers).await;
    drop(client);
    assert_nothing_left().await;
}
