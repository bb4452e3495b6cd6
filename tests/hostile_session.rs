//! Interactive sessions against hostile commands and faults: forged agent
//! replies, signals to the agent, FIFOs, sockets and huge files, fork bombs,
//! paused and removed containers, dropped calls. Each case asserts the typed
//! outcome and that the session (or a restarted one) works afterwards.

mod common;

use std::time::{Duration, Instant};

use dockhand::session::{ExecOptions, Session, SessionApi, SessionConfig};
use dockhand::{Error, FileErrorKind, State};

async fn started(config: SessionConfig) -> Session {
    let s = common::client().await.session(config);
    s.start().await.expect("session starts");
    s
}

/// The session answers a command and a file round trip correctly.
async fn assert_works(s: &Session) {
    let r = s.exec("echo $((6 * 7))").await.expect("exec works");
    assert_eq!((r.exit_code, r.stdout.as_str()), (0, "42\n"));
    s.write_file("probe.txt", b"probe")
        .await
        .expect("write works");
    assert_eq!(s.read_file("probe.txt").await.unwrap(), b"probe");
    assert_eq!(s.state(), State::Idle);
}

#[tokio::test]
async fn commands_cannot_reach_or_stop_the_agent() {
    let s = started(SessionConfig::new()).await;
    // The agent's channel: its stdout, through /proc.
    let forged = r#"{"type":"exit","id":99,"code":0,"timed_out":false,"stdout":"","stderr":"","stdout_truncated":false,"stderr_truncated":false}"#;
    let r = s
        .exec(&format!("echo '{forged}' > /proc/1/fd/1 && echo reached"))
        .await
        .unwrap();
    assert_ne!(r.exit_code, 0, "wrote into the agent's channel: {r:?}");
    assert!(!r.stdout.contains("reached"));
    let r = s.exec("cat /proc/1/environ").await.unwrap();
    assert_ne!(r.exit_code, 0, "read the agent's environment");
    // Signals to the agent (PID 1) are not delivered.
    for signal in ["INT", "TERM", "KILL", "STOP", "HUP", "USR1"] {
        let _ = s.exec(&format!("kill -{signal} 1")).await;
        assert_works(&s).await;
    }
    s.close().await.unwrap();
}

#[tokio::test]
async fn reads_of_fifos_sockets_and_huge_files_fail_at_once() {
    let s = started(SessionConfig::new().read_limit(1 << 20)).await;
    let r = s
        .exec("mkfifo pipe && truncate -s 4G sparse && python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.bind('/tmp/sock')\" && head -c 2000000 /dev/zero > big && ln -s /dev/zero zero")
        .await
        .unwrap();
    assert_eq!(r.exit_code, 0, "{r:?}");
    for (path, kind) in [
        ("pipe", FileErrorKind::NotAFile),
        ("/tmp/sock", FileErrorKind::NotAFile),
        ("sparse", FileErrorKind::TooLarge),
        ("big", FileErrorKind::TooLarge),
        ("zero", FileErrorKind::OutsideSession),
    ] {
        let started = Instant::now();
        match s.read_file(path).await {
            Err(Error::SessionFile { kind: got, .. }) => assert_eq!(got, kind, "{path}"),
            other => panic!("{path}: expected {kind:?}, got {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{path} was slow"
        );
    }
    assert_works(&s).await;
    s.close().await.unwrap();
}

#[tokio::test]
async fn a_fork_bomb_is_ended_typed_and_the_session_answers_at_once() {
    let s = started(SessionConfig::new().pids(64)).await;
    for bomb in [
        // In its own process group, and one whose processes leave it.
        "b() { b | b & }; b; sleep 60",
        "b() { setsid sh -c 'b() { b | b & }; b' & b | b & }; b; sleep 60",
    ] {
        let started_at = Instant::now();
        let result = s
            .exec_with(bomb, ExecOptions::new().timeout(Duration::from_secs(60)))
            .await;
        let took = started_at.elapsed();
        // Either its own exit says so, or a request found no pid left.
        match &result {
            Err(e @ Error::ProcessLimit { limit, .. }) => {
                assert_eq!(*limit, 64);
                let text = e.to_string();
                assert!(text.contains("pids limit of 64"), "{text}");
                assert!(text.contains("answers again"), "{text}");
            }
            other => panic!("{bomb}: {other:?}"),
        }
        assert!(
            took < Duration::from_secs(15),
            "{bomb}: ended after {took:?}"
        );
        // The session answers at once: no pid is held any more.
        let alive = s.exec("echo alive").await.expect("the next command runs");
        assert_eq!(alive.stdout, "alive\n");
        let threads = s
            .exec("python3 -c 'import threading; t = threading.Thread(target=print, args=(\"thread ok\",)); t.start(); t.join()'")
            .await
            .unwrap();
        assert_eq!(threads.stdout, "thread ok\n");
        let left = s.exec("ls /proc | grep -c '^[0-9]'").await.unwrap().stdout;
        assert!(
            left.trim().parse::<u32>().unwrap() < 8,
            "processes left after the bomb: {left}"
        );
    }
    assert_works(&s).await;
    s.close().await.unwrap();
}

#[tokio::test]
async fn a_paused_session_answers_at_its_limit_and_restarts() {
    let s = started(SessionConfig::new().request_timeout(Duration::from_secs(2))).await;
    let id = s.describe().container_id.unwrap();
    common::docker(&["pause", &id]);
    let started_at = Instant::now();
    let err = s
        .exec_with(
            "echo hi",
            ExecOptions::new().timeout(Duration::from_secs(2)),
        )
        .await
        .unwrap_err();
    let took = started_at.elapsed();
    assert!(matches!(err, Error::SessionUnavailable { .. }), "{err:?}");
    // Generous: it only catches a hang.
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert_eq!(s.state(), State::Error);
    s.start().await.expect("starts again");
    assert_works(&s).await;

    // A file request to a paused container, too.
    let id = s.describe().container_id.unwrap();
    common::docker(&["pause", &id]);
    let err = s.read_file("probe.txt").await.unwrap_err();
    assert!(matches!(err, Error::SessionUnavailable { .. }), "{err:?}");
    s.start().await.expect("starts again");
    assert_works(&s).await;
    s.close().await.unwrap();
}

#[tokio::test]
async fn a_removed_container_is_unavailable_and_restarts() {
    let s = started(SessionConfig::new()).await;
    let id = s.describe().container_id.unwrap();
    common::docker(&["rm", "-f", &id]);
    let err = s.exec("echo hi").await.unwrap_err();
    assert!(matches!(err, Error::SessionUnavailable { .. }), "{err:?}");
    s.start().await.expect("starts again");
    assert_works(&s).await;
    s.close().await.unwrap();
    // Its volumes went with it (tests/zz_leftovers.rs checks every volume).
    assert!(!common::container_exists(&id));
}

#[tokio::test]
async fn dropped_calls_leave_the_session_usable() {
    let s = started(SessionConfig::new()).await;
    let dropped = tokio::time::timeout(Duration::from_millis(300), s.exec("sleep 5")).await;
    assert!(dropped.is_err());
    assert_eq!(s.state(), State::Idle, "not stuck in running");
    assert_works(&s).await;
    let stream = s
        .exec_stream("sleep 5", ExecOptions::new())
        .await
        .expect("stream starts");
    drop(stream);
    assert_eq!(s.state(), State::Idle);
    assert_works(&s).await;
    s.close().await.unwrap();
}
