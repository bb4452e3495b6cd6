//! Watching a session's directories by inotify in its agent, against the
//! real daemon: what is made, written, moved and removed, at once or not.

mod common;

use std::time::Duration;

use dockhand::session::{FileEvent, FileEventKind, FileWatch, SessionApi, SessionConfig};
use dockhand::{Error, FileErrorKind};
use futures::StreamExt;

/// Events until `done` says so or 20 s pass (then it fails, showing them).
async fn until(
    watch: &mut FileWatch,
    mut done: impl FnMut(&[FileEvent]) -> bool,
) -> Vec<FileEvent> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !done(&seen) {
        match tokio::time::timeout_at(deadline, watch.next()).await {
            Ok(Some(Ok(event))) => seen.push(event),
            Ok(Some(Err(e))) => panic!("the watch failed: {e}; seen: {seen:?}"),
            Ok(None) => panic!("the watch ended; seen: {seen:?}"),
            Err(_) => panic!("not seen within 20 s; seen: {seen:?}"),
        }
    }
    seen
}

fn has(seen: &[FileEvent], path: &str, kind: FileEventKind) -> bool {
    seen.iter().any(|e| e.path == path && e.kind == kind)
}

/// Events that come within `quiet` of the last.
async fn drain(watch: &mut FileWatch, quiet: Duration) -> Vec<FileEvent> {
    let mut seen = Vec::new();
    while let Ok(Some(event)) = tokio::time::timeout(quiet, watch.next()).await {
        seen.push(event.unwrap());
    }
    seen
}

/// The host's inotify instances are counted per user, and sessions share
/// theirs: the tests of this binary take turns.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn changes_are_seen_as_they_happen_even_the_briefest() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let client = common::client().await;
    let s = client.session(SessionConfig::new());
    s.start().await.unwrap();
    s.exec("mkdir -p old/deep").await.unwrap();
    let mut all = s.watch(".", true).await.unwrap();
    let mut top = s.watch(".", false).await.unwrap();

    // Made and removed in one breath: a listing would never see it.
    s.exec("echo x > brief.txt; rm brief.txt").await.unwrap();
    let seen = until(&mut all, |s| has(s, "brief.txt", FileEventKind::Remove)).await;
    let brief: Vec<FileEventKind> = seen
        .iter()
        .filter(|e| e.path == "brief.txt")
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        brief,
        [
            FileEventKind::Create,
            FileEventKind::Write,
            FileEventKind::Remove
        ]
    );

    // A file written through the SDK is made and written, whatever the
    // agent does to write it whole.
    s.write_file("api.txt", b"through the agent").await.unwrap();
    let seen = until(&mut all, |s| has(s, "api.txt", FileEventKind::Write)).await;
    assert!(has(&seen, "api.txt", FileEventKind::Create), "{seen:?}");
    assert!(
        seen.iter().all(|e| !e.path.contains(".dockhand-")),
        "{seen:?}"
    );

    // Directories made after the watch began are watched, and what they
    // held by then is reported.
    s.exec("mkdir -p new/a/b && echo hi > new/a/b/f.txt && echo more >> new/a/b/f.txt")
        .await
        .unwrap();
    let seen = until(&mut all, |s| has(s, "new/a/b/f.txt", FileEventKind::Write)).await;
    assert!(has(&seen, "new", FileEventKind::Create), "{seen:?}");
    assert!(
        has(&seen, "new/a/b/f.txt", FileEventKind::Create),
        "{seen:?}"
    );
    // A directory there before the watch is watched too.
    s.exec("touch old/deep/x && mv old/deep/x old/deep/y && chmod 600 old/deep/y")
        .await
        .unwrap();
    let seen = until(&mut all, |s| has(s, "old/deep/y", FileEventKind::Chmod)).await;
    assert!(has(&seen, "old/deep/x", FileEventKind::Rename), "{seen:?}");
    assert!(has(&seen, "old/deep/y", FileEventKind::Create), "{seen:?}");

    // Many at once: every one is seen (or the overflow is said).
    s.exec("mkdir many && cd many && for i in $(seq 1 500); do : > f$i; done")
        .await
        .unwrap();
    let seen = until(&mut all, |s| {
        s.iter().any(|e| e.kind == FileEventKind::Overflow)
            || (1..=500).all(|i| has(s, &format!("many/f{i}"), FileEventKind::Create))
    })
    .await;
    assert!(!seen.is_empty());

    // The non-recursive watch saw the top level only.
    let shallow = drain(&mut top, Duration::from_millis(500)).await;
    assert!(
        has(&shallow, "brief.txt", FileEventKind::Remove),
        "{shallow:?}"
    );
    assert!(has(&shallow, "new", FileEventKind::Create), "{shallow:?}");
    assert!(shallow.iter().all(|e| !e.path.contains('/')), "{shallow:?}");

    // Bad paths are typed errors.
    s.write_file("plain.txt", b"x").await.unwrap();
    match s.watch("plain.txt", false).await {
        Err(Error::SessionFile { kind, .. }) => assert_eq!(kind, FileErrorKind::NotADirectory),
        other => panic!("{other:?}"),
    }
    match s.watch("/etc", false).await {
        Err(Error::SessionFile { kind, .. }) => assert_eq!(kind, FileErrorKind::OutsideSession),
        other => panic!("{other:?}"),
    }
    match s.watch("missing", false).await {
        Err(Error::SessionFile { kind, .. }) => assert_eq!(kind, FileErrorKind::NotFound),
        other => panic!("{other:?}"),
    }

    // A watched directory removed ends its watch with a typed error.
    let mut doomed = s.watch("old", true).await.unwrap();
    s.exec("rm -rf old").await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match doomed.next().await {
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Some(e),
                None => return None,
            }
        }
    })
    .await
    .expect("the watch of a removed directory ended");
    assert!(
        matches!(
            ended,
            Some(Error::SessionFile {
                kind: FileErrorKind::NotFound,
                ..
            })
        ),
        "{ended:?}"
    );

    // Dropped watches end in the agent: many made and dropped, then one
    // more still works, and so does the session.
    drop(all);
    drop(top);
    for _ in 0..40 {
        drop(s.watch(".", true).await.unwrap());
    }
    let mut last = s.watch(".", false).await.unwrap();
    s.exec("touch last").await.unwrap();
    until(&mut last, |s| has(s, "last", FileEventKind::Create)).await;
    let id = s.describe().container_id.expect("a container");
    s.close().await.unwrap();
    common::wait_gone(&id).await;
}

/// Code in a session takes every inotify instance its user may have on the
/// host: a watch is refused with a message that says so (not a hang, not a
/// bare errno), the session serves on, and watches work once they are free.
#[tokio::test]
async fn a_session_that_hoards_inotify_instances_gets_a_clear_refusal() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let client = common::client().await;
    let s = client.session(SessionConfig::new());
    s.start().await.unwrap();
    let hog = s
        .spawn(
            "exec python3 -c \"import ctypes, time\nlibc = ctypes.CDLL(None)\nheld = 0\nwhile libc.inotify_init1(0o2000000) >= 0:\n    held += 1\nprint(held, flush=True)\ntime.sleep(600)\"",
            dockhand::session::SpawnOptions::new(),
        )
        .await
        .unwrap();
    let mut events = hog.events;
    let held = match tokio::time::timeout(Duration::from_secs(20), events.next()).await {
        Ok(Some(Ok(dockhand::session::ExecEvent::Stdout(b)))) => {
            String::from_utf8_lossy(&b).trim().to_string()
        }
        other => panic!("the hoarder said nothing: {other:?}"),
    };
    assert!(held.parse::<usize>().unwrap() > 0, "{held}");
    match s.watch(".", true).await {
        Err(Error::SessionFile { message, .. }) => {
            assert!(message.contains("max_user_instances"), "{message}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(s.exec("echo serving").await.unwrap().stdout, "serving\n");
    hog.control.signal(9).await.unwrap();
    while let Some(event) = events.next().await {
        if let dockhand::session::ExecEvent::Exit(_) = event.unwrap() {
            break;
        }
    }
    let mut watch = s
        .watch(".", false)
        .await
        .expect("a watch once they are free");
    s.exec("touch freed").await.unwrap();
    until(&mut watch, |s| has(s, "freed", FileEventKind::Create)).await;
    let id = s.describe().container_id.expect("a container");
    s.close().await.unwrap();
    common::wait_gone(&id).await;
}
