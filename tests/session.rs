//! Interactive sessions against the real daemon.

mod common;

use std::time::{Duration, Instant};

use dockhand::session::{Edit, ExecEvent, ExecOptions, SessionApi, SessionConfig, SessionTools};
use dockhand::{Error, FileErrorKind, State};
use futures::StreamExt;
use serde_json::json;

async fn started(config: SessionConfig) -> dockhand::session::Session {
    let client = common::client().await;
    let s = client.session(config);
    s.start().await.expect("session starts");
    s
}

#[tokio::test]
async fn exec_runs_in_the_workspace_with_env_stdin_and_cwd() {
    let s = started(SessionConfig::new().env("GREETING", "hello")).await;
    let r = s
        .exec("pwd; echo $GREETING; id -u; echo oops >&2; exit 3")
        .await
        .unwrap();
    assert_eq!(r.exit_code, 3);
    assert_eq!(r.stdout, "/workspace\nhello\n65534\n");
    assert_eq!(r.stderr, "oops\n");
    let r = s
        .exec_with(
            "cat; echo \" $EXTRA\"; pwd",
            ExecOptions::new()
                .stdin("piped")
                .env("EXTRA", "x")
                .cwd("/tmp"),
        )
        .await
        .unwrap();
    assert_eq!(r.stdout, "piped x\n/tmp\n");
    let r = s.exec("python3 -c 'print(6 * 7)'").await.unwrap();
    assert_eq!(r.stdout, "42\n");
    assert!(matches!(
        s.exec_with("pwd", ExecOptions::new().cwd("/etc")).await,
        Err(Error::SessionFile {
            kind: FileErrorKind::OutsideSession,
            ..
        })
    ));
    s.close().await.unwrap();
}

#[tokio::test]
async fn a_timeout_kills_the_command_and_the_session_survives() {
    let s = started(SessionConfig::new()).await;
    let started_at = Instant::now();
    let err = s
        .exec_with(
            "echo before; sleep 30",
            ExecOptions::new().timeout(Duration::from_millis(500)),
        )
        .await
        .unwrap_err();
    // Generous: the command sleeps 30 s.
    assert!(started_at.elapsed() < Duration::from_secs(20));
    match err {
        Error::CommandTimeout { stdout, .. } => assert_eq!(stdout, "before\n"),
        other => panic!("expected Timeout, got {other:?}"),
    }
    let r = s.exec("ps -eo comm | grep -c sleep || true").await.unwrap();
    assert_eq!(r.stdout.trim(), "0", "the timed-out process is gone");
    assert_eq!(s.exec("echo alive").await.unwrap().stdout, "alive\n");
    assert_eq!(s.state(), State::Idle);
    s.close().await.unwrap();
}

#[tokio::test]
async fn streaming_yields_chunks_in_order_then_the_exit() {
    let s = started(SessionConfig::new()).await;
    let mut stream = s
        .exec_stream(
            "for i in 1 2 3; do echo out$i; echo err$i >&2; sleep 0.1; done; exit 4",
            ExecOptions::new(),
        )
        .await
        .unwrap();
    let mut out = String::new();
    let mut err = String::new();
    let mut first_chunk_at = None;
    let started_at = Instant::now();
    let mut exit = None;
    while let Some(event) = stream.next().await {
        match event.unwrap() {
            ExecEvent::Stdout(b) => {
                first_chunk_at.get_or_insert(started_at.elapsed());
                out.push_str(&String::from_utf8_lossy(&b));
            }
            ExecEvent::Stderr(b) => err.push_str(&String::from_utf8_lossy(&b)),
            ExecEvent::Exit(r) => exit = Some(r),
        }
    }
    assert_eq!(out, "out1\nout2\nout3\n");
    assert_eq!(err, "err1\nerr2\nerr3\n");
    let exit = exit.expect("the stream ends with the exit");
    assert_eq!(exit.exit_code, 4);
    assert!(
        first_chunk_at.unwrap() < exit.duration,
        "output arrived before the command ended"
    );
    s.close().await.unwrap();
}

#[tokio::test]
async fn files_round_trip_binary_and_errors_are_clear() {
    let s = started(SessionConfig::new()).await;
    let binary: Vec<u8> = (0..=255u8).cycle().take(300_000).collect();
    s.write_file("data/blob.bin", &binary).await.unwrap();
    assert_eq!(s.read_file("data/blob.bin").await.unwrap(), binary);
    assert_eq!(
        s.read_file("/workspace/data/blob.bin").await.unwrap().len(),
        300_000
    );
    s.write_file("data/blob.bin", b"replaced").await.unwrap();
    assert_eq!(s.read_to_string("data/blob.bin").await.unwrap(), "replaced");
    let listed = s.list_dir("data").await.unwrap();
    assert_eq!(
        listed.len(),
        1,
        "the atomic write left no temp file: {listed:?}"
    );
    assert_eq!(
        (
            listed[0].name.as_str(),
            listed[0].kind.as_str(),
            listed[0].size
        ),
        ("blob.bin", "file", 8)
    );

    let kind = |r: dockhand::Result<Vec<u8>>| match r {
        Err(Error::SessionFile { kind, .. }) => kind,
        other => panic!("expected a file error, got {other:?}"),
    };
    assert_eq!(
        kind(s.read_file("missing.txt").await),
        FileErrorKind::NotFound
    );
    assert_eq!(kind(s.read_file("data").await), FileErrorKind::IsADirectory);
    assert_eq!(
        kind(s.read_file("../etc/passwd").await),
        FileErrorKind::OutsideSession
    );
    assert_eq!(
        kind(s.read_file("/etc/passwd").await),
        FileErrorKind::OutsideSession
    );
    // A symbolic link pointing out is caught inside the container.
    s.exec("ln -s /etc/passwd sneaky").await.unwrap();
    assert_eq!(
        kind(s.read_file("sneaky").await),
        FileErrorKind::OutsideSession
    );
    assert!(matches!(
        s.list_dir("missing").await,
        Err(Error::SessionFile {
            kind: FileErrorKind::NotFound,
            ..
        })
    ));
    s.remove("data").await.unwrap();
    assert_eq!(
        kind(s.read_file("data/blob.bin").await),
        FileErrorKind::NotFound
    );
    s.close().await.unwrap();
}

#[tokio::test]
async fn edit_file_applies_all_or_nothing() {
    let s = started(SessionConfig::new()).await;
    s.write_file(
        "calc.py",
        b"def add(a, b):\n    return a - b\n\ndef mul(a, b):\n    return a * b\n",
    )
    .await
    .unwrap();
    let result = s
        .edit_file(
            "calc.py",
            &[
                Edit::replace("return a - b", "return a + b"),
                Edit::insert_at(dockhand::session::InsertAt::Start, "# calc\n"),
            ],
        )
        .await
        .unwrap();
    assert_eq!(result.applied, 2);
    assert_eq!(
        s.read_to_string("calc.py").await.unwrap(),
        "# calc\ndef add(a, b):\n    return a + b\n\ndef mul(a, b):\n    return a * b\n"
    );
    let before = s.read_to_string("calc.py").await.unwrap();
    let err = s
        .edit_file(
            "calc.py",
            &[
                Edit::replace("return a * b", "return a ** b"),
                Edit::replace("not there", "x"),
            ],
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Edit(_)), "{err:?}");
    assert_eq!(
        s.read_to_string("calc.py").await.unwrap(),
        before,
        "a failed edit changes nothing"
    );
    s.close().await.unwrap();
}

#[tokio::test]
async fn mounts_are_read_only_or_writable_as_asked() {
    let ro = tempfile::tempdir().unwrap();
    let rw = tempfile::tempdir().unwrap();
    std::fs::write(ro.path().join("input.txt"), "from the host").unwrap();
    // The session runs as an unprivileged user; let it write into the rw mount.
    std::process::Command::new("chmod")
        .args(["0777", rw.path().to_str().unwrap()])
        .status()
        .unwrap();
    let s = started(
        SessionConfig::new()
            .mount(ro.path().to_str().unwrap(), "/data/in", true)
            .mount(rw.path().to_str().unwrap(), "/data/out", false),
    )
    .await;
    assert_eq!(
        s.read_to_string("/data/in/input.txt").await.unwrap(),
        "from the host"
    );
    let err = s.write_file("/data/in/new.txt", b"x").await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::SessionFile {
                kind: FileErrorKind::ReadOnly | FileErrorKind::PermissionDenied,
                ..
            }
        ),
        "{err:?}"
    );
    let r = s.exec("echo x > /data/in/shell.txt").await.unwrap();
    assert_ne!(r.exit_code, 0);
    s.write_file("/data/out/result.txt", b"written in the session")
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(rw.path().join("result.txt")).unwrap(),
        "written in the session"
    );
    s.close().await.unwrap();
}

#[tokio::test]
async fn lazy_env_and_setup_steps_run_once_at_start() {
    let resolved_at = std::sync::Arc::new(std::sync::Mutex::new(None));
    let seen = resolved_at.clone();
    let config = SessionConfig::new()
        .env_lazy("TOKEN", move || {
            *seen.lock().unwrap() = Some(Instant::now());
            "lazy-value".to_string()
        })
        .setup_command("mkdir -p src && echo 'VERSION = 1' > src/version.py")
        .setup(|session| {
            Box::pin(async move {
                session.write_file("setup-hook.txt", b"ran").await?;
                Ok(())
            })
        });
    let configured_at = Instant::now();
    assert!(
        resolved_at.lock().unwrap().is_none(),
        "not resolved when configured"
    );
    let s = started(config).await;
    assert!(resolved_at.lock().unwrap().unwrap() > configured_at);
    assert_eq!(s.exec("echo $TOKEN").await.unwrap().stdout, "lazy-value\n");
    assert_eq!(
        s.read_to_string("src/version.py").await.unwrap(),
        "VERSION = 1\n"
    );
    assert_eq!(s.read_to_string("setup-hook.txt").await.unwrap(), "ran");

    // A failing setup step fails the start and leaves nothing behind.
    let client = common::client().await;
    let broken = client.session(
        SessionConfig::new()
            .name("broken-setup")
            .setup_command("exit 9"),
    );
    match broken.start().await {
        Err(Error::SetupFailed {
            step,
            exit_code,
            hint,
            ..
        }) => {
            assert_eq!((step.as_str(), exit_code), ("exit 9", 9));
            assert_eq!(hint, None);
        }
        other => panic!("expected SetupFailed, got {other:?}"),
    }
    assert_eq!(broken.state(), State::Error);
    // A step that needs the network, in a session without it: the hint says
    // which setting allows it.
    let offline = client.session(SessionConfig::new().setup_command(
        "python3 -c \"import urllib.request; urllib.request.urlopen('http://example.com')\"",
    ));
    match offline.start().await {
        Err(Error::SetupFailed {
            hint: Some(hint), ..
        }) => {
            assert!(hint.contains("SessionConfig::network(true)"), "{hint}")
        }
        other => panic!("expected SetupFailed with a network hint, got {other:?}"),
    }
    assert_eq!(
        common::containers_with_label("dev.dockhand.session-name=broken-setup"),
        0
    );
    s.close().await.unwrap();
}

#[tokio::test]
async fn snapshots_restore_files_and_persist_snapshots_on_close() {
    let client = common::client().await;
    let s = client.session(SessionConfig::new().name("snap-test"));
    s.start().await.unwrap();
    s.write_file("notes/todo.txt", b"remember the milk")
        .await
        .unwrap();
    let snapshot = s.snapshot().await.unwrap();
    s.close().await.unwrap();
    assert!(client
        .snapshots()
        .await
        .unwrap()
        .iter()
        .any(|x| x.image == snapshot.image));

    let restored = client.session(SessionConfig::new().from_snapshot(&snapshot));
    restored.start().await.unwrap();
    assert_eq!(
        restored.read_to_string("notes/todo.txt").await.unwrap(),
        "remember the milk"
    );
    restored.close().await.unwrap();

    let persistent = client.session(SessionConfig::new().name("persist-test").persist(true));
    persistent.start().await.unwrap();
    persistent
        .write_file("state.json", b"{\"step\": 3}")
        .await
        .unwrap();
    let saved = persistent
        .close()
        .await
        .unwrap()
        .expect("persist snapshots on close");
    let again = client.session(SessionConfig::new().from_snapshot(&saved));
    again.start().await.unwrap();
    assert_eq!(
        again.read_to_string("state.json").await.unwrap(),
        "{\"step\": 3}"
    );
    again.close().await.unwrap();

    for snap in [snapshot, saved] {
        client.remove_snapshot(&snap).await.unwrap();
        assert!(!client
            .snapshots()
            .await
            .unwrap()
            .iter()
            .any(|x| x.image == snap.image));
    }
}

#[tokio::test]
async fn agent_tools_end_to_end_and_sessions_stay_apart() {
    let a = started(SessionConfig::new()).await;
    let b = started(SessionConfig::new()).await;
    let tools_a = SessionTools::new(a.clone());
    let tools_b = SessionTools::read_only(b.clone());
    let defs: Vec<&str> = tools_a.definitions().iter().map(|d| d.name).collect();
    assert_eq!(
        defs,
        ["shell", "read_file", "write_file", "edit_file", "list_dir"]
    );
    assert!(tools_a
        .definitions()
        .iter()
        .all(|d| d.parameters["type"] == "object"));

    tools_a
        .call(
            "write_file",
            json!({"path": "app.py", "content": "print('v1')\n"}),
        )
        .await
        .unwrap();
    let edited = tools_a
        .call(
            "edit_file",
            json!({"path": "app.py", "edits": [{"old": "v1", "new": "v2"}]}),
        )
        .await
        .unwrap();
    assert_eq!(edited["applied"], 1);
    let ran = tools_a
        .call("shell", json!({"command": "python3 app.py"}))
        .await
        .unwrap();
    assert_eq!(ran["stdout"], "v2\n");
    let missing = tools_b
        .call("read_file", json!({"path": "app.py"}))
        .await
        .unwrap();
    assert!(
        missing["error"].as_str().unwrap().contains("app.py"),
        "session b sees its own workspace: {missing}"
    );
    let refused = tools_b
        .call("shell", json!({"command": "rm -rf /workspace"}))
        .await
        .unwrap();
    assert!(refused["error"].is_string());
    let timed = tools_a
        .call("shell", json!({"command": "sleep 10", "timeout": 0.3}))
        .await
        .unwrap();
    assert!(timed["error"].as_str().unwrap().contains("killed"));
    a.close().await.unwrap();
    b.close().await.unwrap();
}

#[tokio::test]
async fn lifecycle_describe_and_close_leave_nothing() {
    let client = common::client().await;
    let s = client.session(SessionConfig::new().name("lifecycle"));
    assert_eq!(s.state(), State::Init);
    assert!(matches!(
        s.exec("true").await,
        Err(Error::SessionUnavailable { .. })
    ));
    s.start().await.unwrap();
    assert_eq!(s.state(), State::Idle);
    s.exec("true").await.unwrap();
    let d = s.describe();
    assert_eq!((d.commands, d.workspace.as_str()), (1, "/workspace"));
    let id = d.container_id.unwrap();
    s.stop().await.unwrap();
    assert_eq!(s.state(), State::Error);
    s.start().await.unwrap();
    let started_close = Instant::now();
    s.close().await.unwrap();
    // Generous: it only catches waiting out a stop timeout twice.
    assert!(started_close.elapsed() < Duration::from_secs(15));
    assert_eq!(s.state(), State::Closed);
    assert!(matches!(
        s.start().await,
        Err(Error::InvalidTransition { .. })
    ));
    assert_eq!(
        common::containers_with_label("dev.dockhand.session-name=lifecycle"),
        0
    );
    let _ = id;

    // Dropping the last handle removes the container too.
    let dropped = client.session(SessionConfig::new().name("dropped-session"));
    dropped.start().await.unwrap();
    drop(dropped);
    // On a current-thread runtime the removal finishes on its own thread.
    let mut left = 1;
    for _ in 0..50 {
        left = common::containers_with_label("dev.dockhand.session-name=dropped-session");
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        left, 0,
        "the dropped session's container outlived it by 5 s"
    );
}

/// The README's session snippet, as written there (the client aside).
#[tokio::test]
async fn the_readme_session_snippet_works_as_written() {
    use dockhand::ImageSpec;
    let client = common::client().await;
    let s = client.session(
        SessionConfig::new()
            .image(ImageSpec::default().pip(["rich"]).trust_host_certificates()) // built once
            .workspace("/workspace")
            .mount("/tmp", "/data", true) // a host directory, read-only
            .env_lazy("TOKEN", || "fetched at start".into())
            .setup_command("python3 -c 'import rich'") // once, after start
            .persist(true), // snapshot on close
    );
    s.start().await.unwrap();
    s.write_file("calc.py", b"def add(a, b):\n    return a - b\n")
        .await
        .unwrap();
    s.edit_file("calc.py", &[Edit::replace("return a - b", "return a + b")])
        .await
        .unwrap();
    let r = s
        .exec("python3 -c 'import calc; print(calc.add(2, 3))'")
        .await
        .unwrap();
    assert_eq!(r.stdout, "5\n");
    let tools = SessionTools::new(s.clone());
    assert_eq!(tools.definitions().len(), 5);
    let out = tools.call("shell", json!({"command": "ls"})).await.unwrap();
    assert!(out.to_string().contains("calc.py"), "{out}");
    let snapshot = s
        .close()
        .await
        .unwrap()
        .expect("persist snapshots on close");
    client.remove_snapshot(&snapshot).await.unwrap();
}

/// Input sent the moment a command's pid is known reaches it: the agent
/// registers a command's input before it reports the pid (the E2B SDKs send
/// `SendInput` and `CloseStdin` right after the start).
#[tokio::test]
async fn input_sent_as_soon_as_a_command_starts_is_never_lost() {
    use dockhand::session::SpawnOptions;
    let s = started(SessionConfig::new()).await;
    let feed = |n: usize| {
        let s = s.clone();
        async move {
            let mut p = s
                .spawn("cat", SpawnOptions::new().stdin(true))
                .await
                .expect("spawn");
            let line = format!("piped {n}\n");
            p.control.send_stdin(line.as_bytes()).await.expect("input");
            p.control.close_stdin().await.expect("close");
            let mut stdout = String::new();
            // Generous: only a lost input (cat waiting for ever) trips it.
            let watched = tokio::time::timeout(Duration::from_secs(60), async {
                while let Some(event) = p.events.next().await {
                    match event.expect("event") {
                        ExecEvent::Stdout(bytes) => {
                            stdout.push_str(&String::from_utf8_lossy(&bytes))
                        }
                        ExecEvent::Exit(r) => return r.exit_code,
                        _ => {}
                    }
                }
                -1
            })
            .await;
            assert_eq!(
                watched,
                Ok(0),
                "command {n} never ended: its input was lost"
            );
            assert_eq!(stdout, line);
        }
    };
    for round in 0..5 {
        futures::future::join_all((0..16).map(|i| feed(round * 16 + i))).await;
    }
    s.close().await.expect("close");
}

/// `len` bytes that no compression or pattern shortcut makes cheap.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_files_stream_both_ways_and_a_stalled_reader_wedges_nothing() {
    const SIZE: usize = 100 << 20;
    let s = started(SessionConfig::new()).await;
    let data = noise(SIZE, 0x5eed);
    let pieces = futures::stream::iter(
        data.chunks(256 << 10)
            .map(|c| Ok::<_, std::io::Error>(bytes::Bytes::copy_from_slice(c)))
            .collect::<Vec<_>>(),
    );
    let started_at = Instant::now();
    let written = s.write_file_from("big.bin", pieces, 1 << 30).await.unwrap();
    let up = started_at.elapsed();
    assert_eq!(written, SIZE as u64);
    // Read back as a stream, in bounded pieces: byte-exact.
    let started_at = Instant::now();
    let mut back = Vec::with_capacity(SIZE);
    let mut chunks = std::pin::pin!(s.read_file_stream("big.bin", 1 << 30));
    let mut largest = 0;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.unwrap();
        largest = largest.max(chunk.len());
        back.extend_from_slice(&chunk);
    }
    let down = started_at.elapsed();
    assert_eq!(back.len(), SIZE);
    assert!(
        back == data,
        "the file read back differs from the one written"
    );
    assert!(largest <= 4 << 20, "a chunk of {largest} bytes");
    eprintln!(
        "100 MiB: written in {up:?} ({:.0} MiB/s), read back in {down:?} ({:.0} MiB/s)",
        100.0 / up.as_secs_f64(),
        100.0 / down.as_secs_f64()
    );
    drop(back);
    assert_eq!(
        s.exec("wc -c < big.bin").await.unwrap().stdout.trim(),
        SIZE.to_string()
    );
    // Past the session's read limit (64 MiB by default) `read_file` refuses
    // it before any byte crosses, and the session goes on.
    match s.read_file("big.bin").await {
        Err(Error::SessionFile {
            kind: FileErrorKind::TooLarge,
            ..
        }) => {}
        other => panic!("expected TooLarge, got {:?}", other.map(|b| b.len())),
    }
    // A reader that takes one piece and stalls, then goes away: nothing
    // waits on it, and every later call works.
    let mut stalled = Box::pin(s.read_file_stream("big.bin", 1 << 30));
    let first = stalled.next().await.unwrap().unwrap();
    assert_eq!(first[..], data[..first.len()]);
    let r = s.exec("echo while-stalled").await.unwrap();
    assert_eq!(r.stdout, "while-stalled\n");
    s.write_file("small.txt", b"small").await.unwrap();
    assert_eq!(s.read_file("small.txt").await.unwrap(), b"small");
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(stalled);
    assert_eq!(s.exec("echo after").await.unwrap().stdout, "after\n");
    // Into a writer, whole.
    let mut sink = Vec::new();
    let n = s.read_file_to("big.bin", &mut sink, 1 << 30).await.unwrap();
    assert_eq!((n as usize, sink.len()), (SIZE, SIZE));
    assert!(sink == data);
    assert_eq!(s.state(), State::Idle);
    s.close().await.unwrap();
}
