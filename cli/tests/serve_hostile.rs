//! `dockhand serve` against hostile clients, over raw HTTP as they would
//! send it: floods of large bodies with no key or token (refused before a
//! byte of body is read: the server's memory stays flat), creates racing
//! for a key's last places and the server's (never more than the limits,
//! and 429 in E2B's shape past them), malformed JSON (400), and nothing
//! left behind.

mod common;
#[path = "common/serve_server.rs"]
mod serve_server;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use serve_server::{flood, raw_create, wait_until_none, Server, KEY, OTHER_KEY, SERIAL};

/// A field of `/proc/<pid>/status`, in KiB.
fn proc_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the server runs");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in {status}"))
}

#[test]
fn hostile_clients_get_typed_refusals_and_the_limits_hold() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let server = Server::start_with(
        0,
        &["--max-sandboxes-per-key", "10", "--max-sandboxes", "15"],
    );
    let pid = server.pid();
    let url = server.url.clone();

    // Token-less and key-less calls with 100 MiB bodies, eight at once on
    // each of three routes: each is refused from its headers.
    let rss_before = proc_kib(pid, "VmRSS:");
    let started = Instant::now();
    let r = flood(&["unauth", &url, "8", "100"]);
    let took = started.elapsed();
    let peak = proc_kib(pid, "VmHWM:");
    for result in r["results"].as_array().unwrap() {
        let status = result["status"].as_i64();
        assert!(
            matches!(status, Some(401 | 404) | None),
            "a refusal, or the connection closed after it: {result}"
        );
        if status.is_none() {
            assert_ne!(
                result["ended"], "sent",
                "no answer to a whole body: {result}"
            );
        }
    }
    assert!(
        r["results"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["status"].as_i64().is_some()),
        "some refusals are read: {r}"
    );
    let grew_mib = peak.saturating_sub(rss_before) / 1024;
    eprintln!("unauthenticated flood: {took:?}, server RSS {rss_before} KiB, peak {peak} KiB (+{grew_mib} MiB)");
    assert!(
        grew_mib <= 64,
        "the server grew by {grew_mib} MiB reading bodies of strangers"
    );

    // Malformed JSON is the caller's error.
    let bad = flood(&["raw", &url, KEY, "POST", "/sandboxes", "{not json"]);
    assert_eq!(bad["status"], 400, "{bad}");

    // 200 creates, 40 at once, for a key with a limit of 10.
    let r = flood(&["creates", &url, KEY, "200", "40"]);
    eprintln!("creates racing for 10 places: {r}");
    assert_eq!(r["statuses"]["201"], 10, "{r}");
    assert_eq!(r["statuses"]["429"], 190, "{r}");
    assert_eq!(
        r["statuses"].as_object().unwrap().len(),
        2,
        "only 201 and 429: {r}"
    );
    assert_eq!(
        r["shapes"],
        serde_json::json!([["429", "('code', 'message')", "429"]]),
        "{r}"
    );
    let mine: Vec<String> = r["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    let set = flood(&[
        "raw",
        &url,
        KEY,
        "POST",
        &format!("/sandboxes/{}/timeout", mine[0]),
        "{bad",
    ]);
    assert_eq!(set["status"], 400, "{set}");

    // Another key reaches the server's limit (15 in all), not its own.
    let r = flood(&["creates", &url, OTHER_KEY, "10", "10"]);
    eprintln!("a second key against the server's limit: {r}");
    assert_eq!(r["statuses"]["201"], 5, "{r}");
    assert_eq!(r["statuses"]["429"], 5, "{r}");
    assert!(
        r["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m.as_str().unwrap().contains("the server runs 15")),
        "{r}"
    );
    let listed = flood(&["raw", &url, KEY, "GET", "/v2/sandboxes", ""]);
    let listed: Value = serde_json::from_str(listed["body"].as_str().unwrap()).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 10, "{listed}");

    // A killed sandbox frees its place.
    let killed = flood(&[
        "raw",
        &url,
        KEY,
        "DELETE",
        &format!("/sandboxes/{}", mine[0]),
        "",
    ]);
    assert_eq!(killed["status"], 204, "{killed}");
    let r = flood(&["creates", &url, KEY, "3", "3"]);
    assert_eq!(r["statuses"]["201"], 1, "{r}");

    drop(server);
    assert_eq!(
        wait_until_none(pid, Duration::from_secs(60)),
        Vec::<String>::new()
    );
}

/// The sandbox container of a server's sandbox, found by its labels.
fn container_of(pid: u32) -> String {
    let out = Command::new("docker")
        .args(["ps", "-q", "--filter"])
        .arg(format!("label=dev.dockhand.owner-pid={pid}"))
        .args(["--filter", "label=dev.dockhand.kind=session"])
        .output()
        .expect("docker CLI");
    let text = String::from_utf8_lossy(&out.stdout);
    let ids: Vec<&str> = text.lines().collect();
    assert_eq!(ids.len(), 1, "one sandbox: {ids:?}");
    ids[0].to_string()
}

fn in_container(id: &str, script: &str) -> String {
    let out = Command::new("docker")
        .args(["exec", id, "sh", "-c", script])
        .output()
        .expect("docker exec");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Four 100 MiB uploads at once stream into the sandbox: all arrive whole,
/// the server's memory stays within 64 MiB of where it was, one past the
/// limit is 413 and leaves nothing behind. The time of one upload is
/// printed beside `docker cp` of the same bytes.
#[test]
fn large_uploads_stream_in_bounded_memory() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let limit = (100u64 << 20).to_string();
    let server = Server::start_with(0, &["--max-upload", &limit]);
    let pid = server.pid();
    let url = server.url.clone();
    let made = raw_create(&url);
    assert_eq!(made["status"], 201, "{made}");
    let made: Value = serde_json::from_str(made["body"].as_str().unwrap()).unwrap();
    let (id, token) = (
        made["sandboxID"].as_str().unwrap(),
        made["envdAccessToken"].as_str().unwrap(),
    );
    let container = container_of(pid);

    let rss_before = proc_kib(pid, "VmRSS:");
    let started = Instant::now();
    let one = flood(&["uploads", &url, id, token, "1", "100"]);
    let one_took = started.elapsed();
    assert_eq!(one["results"][0]["status"], 200, "{one}");
    let r = flood(&["uploads", &url, id, token, "4", "100"]);
    let peak = proc_kib(pid, "VmHWM:");
    for result in r["results"].as_array().unwrap() {
        assert_eq!(result["status"], 200, "{result}");
    }
    let grew_mib = peak.saturating_sub(rss_before) / 1024;
    // Whole, and the bytes in order (a known pattern).
    let sums = in_container(
        &container,
        "for n in 0 1 2 3; do wc -c < /home/user/up-$n; done; \
         cmp -s /home/user/up-0 /home/user/up-3 && echo same; \
         head -c 512 /home/user/up-1 | od -An -tu1 | tr -s ' \\n' ' ' | cut -c1-24",
    );
    let lines: Vec<&str> = sums.lines().collect();
    assert_eq!(&lines[..4], &["104857600"; 4], "{sums}");
    assert_eq!(lines[4], "same", "{sums}");
    assert!(lines[5].starts_with(" 0 1 2 3 4 5 6 7"), "{sums}");

    // The same bytes through `docker cp`, for scale.
    let file = tempfile::NamedTempFile::new().unwrap();
    let block: Vec<u8> = (0..=255u8).cycle().take(1 << 20).collect();
    for _ in 0..100 {
        std::io::Write::write_all(&mut file.as_file(), &block).unwrap();
    }
    let started = Instant::now();
    let copied = Command::new("docker")
        .arg("cp")
        .arg(file.path())
        .arg(format!("{container}:/home/user/cp-copy"))
        .status()
        .unwrap();
    let cp_took = started.elapsed();
    assert!(copied.success());
    eprintln!(
        "upload of 100 MiB: {one_took:?} (docker cp of the same: {cp_took:?}); four at once: {:?}; \
         server RSS {rss_before} KiB, peak {peak} KiB (+{grew_mib} MiB)",
        r["results"].as_array().unwrap().iter().map(|x| x["secs"].clone()).collect::<Vec<_>>()
    );
    assert!(
        grew_mib <= 64,
        "four uploads grew the server by {grew_mib} MiB"
    );

    // One byte over the limit: 413, the old file untouched, no temporary left.
    let over = flood(&["uploads", &url, id, token, "1", "101"]);
    let over = &over["results"][0];
    // 413, or (the server having answered and closed before the client
    // finished sending) the connection ended early.
    assert!(
        over["status"] == 413 || (over["status"].is_null() && over["ended"] != "sent"),
        "{over}"
    );
    std::thread::sleep(Duration::from_secs(1));
    let left = in_container(
        &container,
        "wc -c < /home/user/up-0; ls -a /home/user | grep -c dockhand-upload",
    );
    assert_eq!(
        left, "104857600\n0",
        "the old file stays and nothing is left"
    );

    drop(server);
    assert_eq!(
        wait_until_none(pid, Duration::from_secs(60)),
        Vec::<String>::new()
    );
}

/// 100 MiB read back through the E2B SDK byte-exact (timed beside the
/// upload), with the server's memory within 64 MiB of where it was; a raw
/// client that takes the first MiB of a download and stops reading holds
/// nothing up (a command and a small file meanwhile, then everything after
/// it goes away), and nothing is left behind.
#[test]
fn large_downloads_stream_and_a_stalled_reader_wedges_nothing() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let limit = (100u64 << 20).to_string();
    let server = Server::start_with(0, &["--max-upload", &limit]);
    let pid = server.pid();
    let rss_before = proc_kib(pid, "VmRSS:");
    let r = serve_server::json_output(server.python("large_files.py", &[]));
    let peak = proc_kib(pid, "VmHWM:");
    eprintln!(
        "100 MiB through the E2B SDK: written in {} s, read in {} s; a stalled reader: {}; \
         server RSS {rss_before} KiB, peak {peak} KiB",
        r["write_secs"], r["read_secs"], r["while_stalled_secs"]
    );
    assert_eq!(r["read_size"], 100 << 20, "{r}");
    assert_eq!(r["read_exact"], true, "{r}");
    assert_eq!(r["after_read"], "104857600", "{r}");
    assert_eq!(r["stalled_status"], "200", "{r}");
    assert_eq!(r["stalled_got_mib"], 1, "{r}");
    assert_eq!(r["while_stalled"], "while-stalled", "{r}");
    assert_eq!(r["small_read"], "small", "{r}");
    assert_eq!(r["after_stall"], "after", "{r}");
    assert_eq!(r["again_exact"], true, "{r}");
    // The SDK's writes and reads are whole 100 MiB bodies on its side; the
    // server holds a few pieces of each at a time.
    let grew_mib = peak.saturating_sub(rss_before) / 1024;
    assert!(
        grew_mib <= 64,
        "the transfers grew the server by {grew_mib} MiB"
    );
    drop(server);
    assert_eq!(
        wait_until_none(pid, Duration::from_secs(60)),
        Vec::<String>::new()
    );
}

/// Sends `request` on a new connection (then closes its writing half when
/// `finish`) and returns the answer's head, lower-cased.
fn raw_answer(url: &str, request: &[u8], finish: bool) -> String {
    use std::io::{Read, Write};
    let address = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(request).unwrap();
    if finish {
        stream.shutdown(std::net::Shutdown::Write).unwrap();
    }
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).to_ascii_lowercase()
}

/// A refusal sent before the body was read says `Connection: close` (the
/// client's next request goes on a new connection instead of failing), and
/// an upload whose multipart body is cut short is the client's mistake
/// (400), not the sandbox's; the sandbox takes the next upload.
#[test]
fn refusals_close_the_connection_and_a_cut_upload_is_a_bad_request() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let server = Server::start_with(0, &[]);
    let url = server.url.clone();
    let refused = raw_answer(
        &url,
        b"POST /sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 22\r\n\r\n{\"templateID\": \"base\"}",
        false,
    );
    assert!(refused.starts_with("http/1.1 401"), "{refused}");
    assert!(refused.contains("connection: close"), "{refused}");
    // Without a body there is nothing unread: the connection stays.
    let bodiless = raw_answer(&url, b"GET /sandboxes HTTP/1.1\r\nHost: x\r\n\r\n", false);
    assert!(bodiless.starts_with("http/1.1 401"), "{bodiless}");
    assert!(!bodiless.contains("connection: close"), "{bodiless}");

    let made = raw_create(&url);
    assert_eq!(made["status"], 201, "{made}");
    let made: Value = serde_json::from_str(made["body"].as_str().unwrap()).unwrap();
    let (id, token) = (
        made["sandboxID"].as_str().unwrap(),
        made["envdAccessToken"].as_str().unwrap(),
    );
    let part = "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"cut.txt\"\r\n\r\nonly the start";
    let head = format!(
        "POST /files?path=cut.txt HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: {id}\r\nX-Access-Token: {token}\r\n\
         Content-Type: multipart/form-data; boundary=b\r\nContent-Length: 4096\r\n\r\n{part}"
    );
    let cut = raw_answer(&url, head.as_bytes(), true);
    assert!(cut.starts_with("http/1.1 400"), "{cut}");
    let whole = "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"whole.txt\"\r\n\r\nall of it\r\n--b--\r\n";
    let head = format!(
        "POST /files?path=whole.txt HTTP/1.1\r\nHost: x\r\nE2b-Sandbox-Id: {id}\r\nX-Access-Token: {token}\r\n\
         Content-Type: multipart/form-data; boundary=b\r\nContent-Length: {}\r\n\r\n{whole}",
        whole.len()
    );
    let ok = raw_answer(&url, head.as_bytes(), false);
    assert!(ok.starts_with("http/1.1 200"), "{ok}");
    let pid = server.pid();
    drop(server);
    assert_eq!(
        wait_until_none(pid, Duration::from_secs(60)),
        Vec::<String>::new()
    );
}
