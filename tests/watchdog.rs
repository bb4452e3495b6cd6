//! The per-process watchdog: it holds the daemon's socket, so it must run
//! only dockhand's own program from dockhand's own image, whatever images
//! the process runs; and while its owner lives it removes the volumes of a
//! container removed from outside at once.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use dockhand::session::{SessionApi as _, SessionConfig};
use dockhand::{ImageSpec, Sandbox};

/// The volume a replaced program makes through the daemon's socket if it
/// ever finds one: its existence is the escape.
const EVIDENCE: &str = "dockhand-test-watchdog-escape-evidence";

/// Stands in for `python3` and `sh` in the hostile image: if a daemon socket
/// is reachable, it creates the evidence volume through it, then it carries
/// on as the real program (so the image still works for the one-shot).
const REPLACEMENT: &str = r#"#!/usr/bin/python3.real
import os, socket, sys
for path in ("/run/dockhand/docker.sock", "/var/run/docker.sock", "/run/docker.sock"):
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        body = b'{"Name": "EVIDENCE"}'
        s.sendall(b"POST /volumes/create HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        s.recv(4096)
    except OSError:
        pass
sys.stderr.write("hostile replacement ran as %s\n" % os.path.basename(sys.argv[0]))
sys.stderr.flush()
real = {"python3": "/usr/bin/python3.real", "sh": "/bin/dash"}[os.path.basename(sys.argv[0])]
os.execv(real, [real] + sys.argv[1:])
"#;

fn docker(args: &[&str]) -> (bool, String) {
    let out = Command::new("docker")
        .args(args)
        .output()
        .expect("docker CLI");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
    )
}

fn evidence_exists() -> bool {
    docker(&["volume", "inspect", EVIDENCE]).0
}

/// This process's watchdog container, once it runs (the first time on a
/// machine its image is compiled: allow minutes).
fn wait_for_watchdog() -> String {
    let pid = std::process::id();
    let since = Instant::now();
    loop {
        let (_, id) = docker(&[
            "ps",
            "-q",
            "--filter",
            "label=dev.dockhand.kind=watchdog",
            "--filter",
            &format!("label=dev.dockhand.owner-pid={pid}"),
        ]);
        if !id.is_empty() {
            return id;
        }
        assert!(
            since.elapsed() < Duration::from_secs(900),
            "no watchdog ran within 15 minutes"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A prebuilt image (made outside dockhand, as a caller's would be) whose
/// `python3` and `sh` are the replacement.
fn hostile_image(base: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("replacement"),
        REPLACEMENT.replace("EVIDENCE", EVIDENCE),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("Dockerfile"),
        format!(
            "FROM {base}\n\
             COPY replacement /usr/local/lib/replacement\n\
             RUN [\"/usr/bin/python3\", \"-c\", \"import os, shutil; \
             shutil.move('/usr/bin/python3.11', '/usr/bin/python3.real'); \
             os.remove('/usr/bin/python3'); os.remove('/bin/sh'); \
             os.chmod('/usr/local/lib/replacement', 0o755); \
             os.symlink('/usr/local/lib/replacement', '/usr/bin/python3'); \
             os.symlink('/usr/local/lib/replacement', '/bin/sh')\"]\n"
        ),
    )
    .unwrap();
    let tag = "dockhand-test/hostile-python:watchdog";
    let out = Command::new("docker")
        .args(["build", "-q", "-t", tag])
        .arg(dir.path())
        .output()
        .expect("docker CLI");
    assert!(
        out.status.success(),
        "building the hostile image: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    tag.to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_watchdog_never_runs_a_file_of_a_callers_image() {
    let _ = docker(&["volume", "rm", "-f", EVIDENCE]);
    let client = common::client().await;
    let base = client
        .resolve_image(&ImageSpec::default())
        .await
        .expect("dockhand's base");
    let image = hostile_image(&base.reference);
    // The first container this process makes is from the hostile image: the
    // old watchdog took its python3 from exactly that image.
    let job = Sandbox::command("watchdog-hostile-image", "sh")
        .args(["-c", "python3 -c 'print(6 * 7)'"])
        .image(ImageSpec::prebuilt(&image))
        .build()
        .unwrap();
    let out = client.run(&job, dockhand::NO_INPUTS).await.expect("runs");
    assert_eq!(out.stdout.text.trim(), "42");
    // The control: the replacements are what the image runs.
    assert!(
        out.stderr.text.contains("hostile replacement ran as sh")
            && out
                .stderr
                .text
                .contains("hostile replacement ran as python3"),
        "{}",
        out.stderr.text
    );
    let watchdog = wait_for_watchdog();
    // Another run while it watches, from the same image.
    client.run(&job, dockhand::NO_INPUTS).await.expect("runs");
    let (_, config) = docker(&[
        "inspect",
        "-f",
        "{{.Config.Image}}|{{json .Config.Entrypoint}}|{{json .Config.Cmd}}|{{.HostConfig.ReadonlyRootfs}}|{{json .HostConfig.CapDrop}}|{{.HostConfig.NetworkMode}}|{{json .HostConfig.CapAdd}}",
        &watchdog,
    ]);
    let fields: Vec<&str> = config.split('|').collect();
    assert!(fields[0].starts_with("dockhand/watchdog:"), "{config}");
    assert_eq!(fields[1], r#"["/dockhand-watchdog"]"#, "{config}");
    assert_eq!(fields[2], "null", "no command but the program: {config}");
    assert_eq!(fields[3], "true", "read-only root: {config}");
    assert_eq!(fields[4], r#"["ALL"]"#, "{config}");
    assert_eq!(fields[5], "none", "{config}");
    assert_eq!(fields[6], "null", "{config}");
    // The image holds the program alone: no shell, no interpreter.
    let (_, files) = docker(&[
        "image",
        "inspect",
        "-f",
        "{{len .RootFS.Layers}}",
        fields[0],
    ]);
    assert_eq!(files, "1", "one layer, the program's");
    let (has_shell, _) = docker(&[
        "run",
        "--rm",
        "--entrypoint",
        "/bin/sh",
        fields[0],
        "-c",
        "true",
    ]);
    assert!(!has_shell, "the watchdog's image has a shell");
    assert!(
        !evidence_exists(),
        "a replaced program reached the daemon's socket"
    );
    let _ = docker(&["rmi", "-f", &image]);
}

/// Scratch volumes of `container` (by the token it shares with them).
fn volumes_of(container: &str) -> Vec<String> {
    let (_, token) = docker(&[
        "inspect",
        "-f",
        "{{index .Config.Labels \"dev.dockhand.scratch\"}}",
        container,
    ]);
    assert!(!token.is_empty(), "{container} has a scratch token");
    let (_, names) = docker(&[
        "volume",
        "ls",
        "-q",
        "--filter",
        &format!("label=dev.dockhand.scratch={token}"),
    ]);
    names.lines().map(str::to_string).collect()
}

fn wait_until_gone(volumes: &[String], limit: Duration) -> Vec<String> {
    let since = Instant::now();
    loop {
        let left: Vec<String> = volumes
            .iter()
            .filter(|v| docker(&["volume", "inspect", v]).0)
            .cloned()
            .collect();
        if left.is_empty() || since.elapsed() > limit {
            return left;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn volumes_follow_a_container_removed_or_killed_from_outside() {
    let client = common::client().await;
    for how in ["rm", "kill"] {
        let session = client.session(SessionConfig::new());
        session.start().await.expect("session starts");
        wait_for_watchdog();
        let id = session.describe().container_id.expect("a container");
        let volumes = volumes_of(&id);
        assert!(!volumes.is_empty(), "a session has a scratch volume");
        match how {
            "rm" => assert!(docker(&["rm", "-f", &id]).0),
            _ => assert!(docker(&["kill", &id]).0),
        }
        // This process lives on: nothing waits for it to exit.
        let left = wait_until_gone(&volumes, Duration::from_secs(10));
        assert!(
            left.is_empty(),
            "`docker {how}` on a session left its volumes 10 s later: {left:?}"
        );
        // The session says at once that its container went, and starts again.
        let asked = Instant::now();
        let err = session.exec("echo alive").await.unwrap_err();
        assert!(
            matches!(err, dockhand::Error::SessionUnavailable { .. }),
            "{err:?}"
        );
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "{:?}",
            asked.elapsed()
        );
        session.start().await.expect("starts again");
        let answer = session.exec("echo alive").await.expect("session answers");
        assert_eq!(answer.stdout.trim(), "alive");
        let restarted = session.describe().container_id.expect("a container");
        let volumes = volumes_of(&restarted);
        session.close().await.expect("closes");
        assert!(wait_until_gone(&volumes, Duration::from_secs(10)).is_empty());
    }
}
