//! What an operator of `dockhand serve` has: per-sandbox metrics through
//! the E2B SDK, Prometheus metrics read by Prometheus' own parser
//! (`prometheus_client` from PyPI), structured request logs with nothing
//! secret in them, and the dashboard in a real browser (Debian's chromium
//! driven by selenium).

mod common;
#[path = "common/serve_server.rs"]
mod serve_server;

use std::time::Duration;

use serde_json::Value;
use serve_server::{flood, json_output, raw_create, Server, KEY, OTHER_KEY, SERIAL};

#[test]
fn metrics_prometheus_and_request_logs_show_what_happened_and_no_secret() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let server = Server::start_logged(
        1,
        &["--log-format", "json", "--metrics-interval", "1"],
        &[("DOCKHAND_LOG", "warn,dockhand::requests=info")],
        &log,
    );
    let secret = format!("log-secret-{}", uuid::Uuid::new_v4().simple());
    let mut script = server.python("observe.py", &[]);
    script.env("LOG_SECRET", &secret);
    let r = json_output(script);
    eprintln!("observe: {r}");

    // get_metrics: a series, the memory the sandbox holds in it.
    assert!(r["points"].as_u64().unwrap() >= 1, "{r}");
    let used = r["mem_used"].as_u64().expect("a reading with 100 MiB held");
    assert!(used >= 100 << 20, "{r}");
    assert!(r["mem_total"].as_u64().unwrap() > used, "{r}");
    assert!(r["cpu_count"].as_u64().unwrap() >= 1, "{r}");
    assert!(r["disk_used"].as_u64().unwrap() >= 20_000_000, "{r}");
    assert_eq!(r["timestamps_rise"], true, "{r}");
    assert_eq!(r["before_window"], 0, "{r}");
    assert_eq!(r["filtered"], 0, "{r}");

    // /metrics: any of the server's keys, parsed by Prometheus' parser.
    assert_eq!(r["status"], 200, "{r}");
    assert!(
        r["content_type"]
            .as_str()
            .unwrap()
            .starts_with("application/openmetrics-text"),
        "{r}"
    );
    assert_eq!(r["bearer_status"], 200, "{r}");
    assert_eq!(r["refused"], 401, "{r}");
    assert_eq!(r["refusal"]["code"], 401, "{r}");
    assert_eq!(r["wrong_key"], 401, "{r}");
    assert!(r["running_base"].as_f64().unwrap() >= 1.0, "{r}");
    assert!(r["creates_base"].as_f64().unwrap() >= 1.0, "{r}");
    assert!(r["create_count"].as_f64().unwrap() >= 1.0, "{r}");
    assert!(r["create_requests"].as_f64().unwrap() >= 1.0, "{r}");
    assert!(r["latency_count"].as_f64().unwrap() >= 1.0, "{r}");
    assert!(r["pool_handovers"].as_f64().unwrap() >= 1.0, "{r}");
    // The egress gateway's figures: the fenced sandbox's refused request.
    assert_eq!(r["denied"], "403", "{r}");
    assert!(r["egress_sandboxes"].as_f64().unwrap() >= 1.0, "{r}");
    assert!(r["egress_connections"].as_f64().unwrap() >= 1.0, "{r}");
    assert!(r["egress_denied"].as_f64().unwrap() >= 1.0, "{r}");
    assert!(r["egress_open"].as_f64().is_some(), "{r}");
    assert_eq!(r["secret_in_metrics"], false, "{r}");

    server.stop_leaving_nothing(Duration::from_secs(30));

    // One JSON object a line; each request line names the key by an id,
    // the sandbox, the route, the status and the latency.
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    let requests: Vec<&Value> = lines
        .iter()
        .filter(|l| l["target"] == "dockhand::requests")
        .collect();
    let create = requests
        .iter()
        .find(|l| l["route"] == "/v2/sandboxes" && l["method"] == "POST")
        .expect("the create's line");
    assert_eq!(create["status"], 201, "{create}");
    assert!(
        create["key"].as_str().unwrap().starts_with("key-"),
        "{create}"
    );
    assert!(create["latency_ms"].as_f64().unwrap() > 0.0, "{create}");
    let id = r["sandbox_id"].as_str().unwrap();
    assert!(
        requests
            .iter()
            .any(|l| l["sandbox"] == id && l["route"] == "/process.Process/{method}"),
        "no in-sandbox call of {id} logged"
    );
    assert!(
        requests
            .iter()
            .any(|l| l["route"] == "/metrics" && l["status"] == 401),
        "the refused scrape is logged"
    );
    // Nothing secret, not even in part: keys, the sandbox's tokens, an env
    // value (also sent in a query string, which is never logged).
    let envd = r["envd_token"].as_str().unwrap();
    let traffic = r["traffic_token"].as_str().unwrap();
    for (what, secret) in [
        ("an API key", KEY),
        ("the other API key", OTHER_KEY),
        ("the envd token", envd),
        ("the traffic token", traffic),
        ("an env value and a query's", secret.as_str()),
    ] {
        for part in secret.as_bytes().windows(12) {
            let part = std::str::from_utf8(part).unwrap();
            assert!(!text.contains(part), "{what} in the log: {part}");
        }
    }
}

#[test]
fn the_dashboard_in_a_real_browser_lists_and_kills_a_sandbox() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let server = Server::start(1);
    let r = json_output(server.python("dashboard.py", &[]));
    eprintln!("dashboard: {r}");
    assert_eq!(r["title"], "dockhand serve");
    assert!(
        r["wrong_key"].as_str().unwrap().contains("not one of"),
        "{r}"
    );
    let kept = r["kept"].as_str().unwrap();
    let doomed = r["doomed"].as_str().unwrap();
    let mut both = vec![kept.to_string(), doomed.to_string()];
    both.sort();
    assert_eq!(r["listed"], serde_json::json!(both), "{r}");
    assert!(r["row_text"].as_str().unwrap().contains("base"), "{r}");
    assert!(
        r["commands"]
            .as_str()
            .unwrap()
            .contains("echo dashboard-check"),
        "{r}"
    );
    assert_eq!(r["listed_after"], serde_json::json!([kept]), "{r}");
    assert_eq!(r["doomed_running"], false, "{r}");
    assert_eq!(r["api_listed"], serde_json::json!([kept]), "{r}");
    assert_eq!(r["console_errors"], serde_json::json!([]), "{r}");

    server.stop_leaving_nothing(Duration::from_secs(30));
}

/// A burst past what the server lets wait for a start: the rest are told
/// to come back (429 in E2B's shape, with `Retry-After`), never a 5xx or a
/// hang; Prometheus counts them by cause; the next create is served.
#[test]
fn creates_past_the_start_queue_get_a_clean_429_and_the_next_is_served() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let server = Server::start_with(
        0,
        &["--concurrent-starts", "1", "--max-waiting-creates", "3"],
    );
    let url = server.url.clone();
    let r = flood(&["creates", &url, KEY, "24", "24"]);
    eprintln!("24 creates at once, 1 start at a time and 3 waiting: {r}");
    let made = r["statuses"]["201"].as_u64().unwrap_or(0);
    let told = r["statuses"]["429"].as_u64().unwrap_or(0);
    assert_eq!(made + told, 24, "only 201 and 429: {r}");
    assert!(made >= 4, "{r}");
    assert!(told >= 10, "{r}");
    assert_eq!(
        r["shapes"],
        serde_json::json!([["429", "('code', 'message')", "429"]]),
        "{r}"
    );
    assert!(
        r["messages"][0]
            .as_str()
            .unwrap()
            .contains("try again shortly"),
        "{r}"
    );
    assert_eq!(r["retry_after"], serde_json::json!(["1"]), "{r}");
    let retry = flood(&["raw", &url, KEY, "GET", "/metrics", ""]);
    let busy = retry["body"]
        .as_str()
        .unwrap()
        .lines()
        .find(|l| {
            l.starts_with("dockhand_sandbox_create_failures_total") && l.contains("cause=\"busy\"")
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok());
    assert_eq!(busy, Some(told as f64), "{retry}");
    let next = raw_create(&url);
    assert_eq!(next["status"], 201, "{next}");

    server.stop_leaving_nothing(Duration::from_secs(30));
}

#[test]
fn ports_inside_sandboxes_answer_at_their_get_host_addresses_behind_the_token() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let server = Server::start_with(1, &["--domain", "sandboxes.test"]);
    let servers = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/ports/servers.py")
        .canonicalize()
        .unwrap();
    let r = json_output(server.python("ports.py", &[servers.to_str().unwrap()]));
    eprintln!("ports: {r}");
    let host = r["host"].as_str().unwrap();
    assert!(
        host.starts_with("8000-") && host.ends_with(".sandboxes.test"),
        "get_host names this server's domain: {r}"
    );
    assert_eq!(r["has_token"], true, "{r}");
    assert_eq!(r["up"], true, "{r}");
    assert_eq!(r["big"]["status"], 200, "{r}");
    assert_eq!(r["big"]["same"], true, "2 MB came through whole: {r}");
    assert_eq!(r["no_token"], 404, "{r}");
    assert_eq!(r["wrong_token"], 404, "{r}");
    let inside = r["seen_inside"].as_str().unwrap();
    assert!(
        inside.starts_with("host=8765-") && inside.ends_with(";token=-"),
        "the server inside sees the Host asked for and never the token: {inside}"
    );
    assert_eq!(r["closed_port"]["status"], 502, "{r}");
    assert!(
        r["closed_port"]["message"]
            .as_str()
            .unwrap()
            .contains("port 9"),
        "{r}"
    );
    assert_eq!(r["ws"]["text"], "hi from the SDK", "{r}");
    assert_eq!(r["ws"]["binary_same"], true, "{r}");
    assert_eq!(r["ws_no_token"]["refused"], 404, "{r}");
    assert_eq!(r["public_up_without_token"], true, "{r}");
    assert_eq!(r["other_sandboxes_token"], 404, "{r}");
    assert_eq!(r["after_kill"], 404, "{r}");
    server.stop_leaving_nothing(Duration::from_secs(30));
}
