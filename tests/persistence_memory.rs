//! Pause, resume and fork with memory: gVisor checkpoints, on a second
//! dockerd of the test's own with `experimental` on and `runsc`
//! registered (the main daemon is left as it is). Needs `runsc`
//! (`.ci/run` installs it); without it the test says it was skipped,
//! except under CI, where that is a failure.
//!
//! One test, one daemon: the steps share the images loaded into it.

mod common;
#[path = "common/second_daemon.rs"]
mod second_daemon;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use dockhand::session::{PauseMode, Session, SessionApi, SessionConfig, SpawnOptions};
use dockhand::{Client, Error, ImageSpec, Isolation, State};
use futures::StreamExt;
use second_daemon::SecondDaemon;

const DAEMON: &str = r#"{"experimental": true, "runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none"]}}}"#;

/// The most the whole test may take.
const TEST_LIMIT: Duration = Duration::from_secs(600);

/// A process that keeps a random token and a count in memory, and writes
/// both to `/tmp/count` (and stdout) every 50 ms: the same token with a
/// larger count later means the same process went on.
const COUNTER: &str = "python3 -u -c \"import os, time\ntoken = os.urandom(8).hex()\ni = 0\nwhile True:\n    i += 1\n    print(token, i, flush=True)\n    open('/tmp/count.new', 'w').write(f'{token} {i}')\n    os.replace('/tmp/count.new', '/tmp/count')\n    time.sleep(0.05)\n\"";

fn gvisor() -> SessionConfig {
    SessionConfig::new()
        .isolation(Isolation::Gvisor)
        .pausable(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_pause_resume_and_fork_under_gvisor() {
    if !second_daemon::runsc_installed() {
        return;
    }
    // On the heap: the whole test's future is too large for a debug
    // build's test thread.
    tokio::time::timeout(TEST_LIMIT, Box::pin(everything()))
        .await
        .unwrap_or_else(|_| {
            panic!("the memory persistence test did not finish within {TEST_LIMIT:?}")
        });
}

/// `(token, count)` from the counter's file.
async fn count_in(s: &Session) -> (String, u64) {
    let text = String::from_utf8(s.read_file("/tmp/count").await.unwrap()).unwrap();
    let (token, n) = text.split_once(' ').unwrap();
    (token.to_string(), n.parse().unwrap())
}

/// Waits until the counter's file shows a count above `after`.
async fn counts_on(s: &Session, token: &str, after: u64) -> u64 {
    let started = Instant::now();
    // The counter prints its first line before it writes its file.
    while s.stat("/tmp/count").await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the counter never wrote its file"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    loop {
        let (t, n) = count_in(s).await;
        assert_eq!(
            t, token,
            "another process wrote the count: the old one did not go on"
        );
        if n > after {
            return n;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the counter stopped at {n}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The directory the daemon keeps a container's checkpoint in.
fn checkpoint_dir(daemon: &SecondDaemon, id: &str) -> PathBuf {
    let dir = daemon
        .dir()
        .join("data/containers")
        .join(id)
        .join("checkpoints");
    let name = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .next()
        .expect("a checkpoint")
        .file_name();
    dir.join(name)
}

async fn everything() {
    let main = common::client().await;
    let base = main.resolve_image(&ImageSpec::default()).await.unwrap();
    let kernel_image = main
        .resolve_image(&common::kernel_config().container_image())
        .await
        .unwrap();
    let daemon = SecondDaemon::start(DAEMON, &base.reference);
    daemon.load(&kernel_image.reference);
    let client = Client::builder()
        .endpoint(&daemon.endpoint)
        .cache_dir(std::env::temp_dir().join(format!("dh-memory-cache-{}", std::process::id())))
        .connect()
        .await
        .unwrap();

    // Without gVisor, memory cannot be saved: typed, and the session runs on.
    let plain = client.session(SessionConfig::new().pausable(true));
    plain.start().await.unwrap();
    let refused = plain.pause(PauseMode::Memory).await.unwrap_err();
    assert!(
        matches!(&refused, Error::PauseUnsupported { reason } if reason.contains("gVisor")),
        "{refused:?}"
    );
    assert_eq!(plain.exec("echo on").await.unwrap().stdout, "on\n");
    plain.close().await.unwrap();

    // A session paused with its memory goes on where it stopped: the same
    // process, its output stream and its files.
    let s = client.session(gvisor());
    s.start().await.unwrap();
    let spawned = s.spawn(COUNTER, SpawnOptions::new()).await.unwrap();
    let mut counter = Lines {
        events: spawned.events,
        buffer: String::new(),
    };
    let first = counter.next().await;
    let token = first.split(' ').next().unwrap().to_string();
    s.write_file("before.txt", b"written before the pause")
        .await
        .unwrap();
    let at_pause = counts_on(&s, &token, 3).await;
    let started = Instant::now();
    let paused = s.pause(PauseMode::Memory).await.unwrap();
    let pause_took = started.elapsed();
    assert_eq!((s.state(), paused.mode), (State::Paused, PauseMode::Memory));
    assert!(paused.checkpoint_bytes.unwrap_or(0) > 1 << 20, "{paused:?}");
    assert!(
        !running(&daemon, &paused.id),
        "a paused container runs nothing"
    );
    assert!(matches!(
        s.exec("true").await.unwrap_err(),
        Error::SessionUnavailable { .. }
    ));
    let started = Instant::now();
    if let Err(e) = s.resume().await {
        let log = std::fs::read_to_string(daemon.dir().join("log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        panic!(
            "resume: {e}\ndaemon log:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    eprintln!(
        "memory pause {pause_took:?}, resume {:?}, checkpoint {} bytes",
        started.elapsed(),
        paused.checkpoint_bytes.unwrap_or(0)
    );
    let after = counts_on(&s, &token, at_pause).await;
    assert!(after > at_pause);
    // The stream of the process spawned before the pause goes on too
    // (past what it had written before the pause).
    loop {
        let line = counter.next().await;
        let (t, n) = line.split_once(' ').unwrap();
        assert_eq!(t, token);
        if n.parse::<u64>().unwrap() > after {
            break;
        }
    }
    assert_eq!(
        s.read_file("before.txt").await.unwrap(),
        b"written before the pause"
    );

    // Forks start from the running session's memory, then diverge.
    let started = Instant::now();
    let forks = s.fork(2, PauseMode::Memory).await.unwrap();
    eprintln!("memory fork to 2: {:?}", started.elapsed());
    assert_eq!(s.state(), State::Idle, "the parent runs on");
    for fork in &forks {
        let (t, n) = count_in(fork).await;
        assert_eq!(t, token, "the fork runs the parent's process");
        counts_on(fork, &token, n).await;
    }
    forks[0].write_file("only-in-0.txt", b"0").await.unwrap();
    s.write_file("parent-later.txt", b"p").await.unwrap();
    for (who, session) in [("fork 1", &forks[1]), ("parent", &s)] {
        assert!(
            session.read_file("only-in-0.txt").await.is_err(),
            "{who} sees fork 0's write"
        );
    }
    for fork in &forks {
        assert!(
            fork.read_file("parent-later.txt").await.is_err(),
            "a fork sees the parent's later write"
        );
    }
    counts_on(&s, &token, after).await;
    for fork in forks {
        fork.close().await.unwrap();
    }

    // A kernel keeps its variables, imports and threads.
    let kernel = client
        .kernel(common::kernel_config().session(|c| c.isolation(Isolation::Gvisor).pausable(true)));
    kernel.start().await.unwrap();
    kernel
        .run("import threading, time\nx = 41\nticks = []\ndef tick():\n    while True:\n        ticks.append(1); time.sleep(0.05)\nthreading.Thread(target=tick, daemon=True).start()")
        .await
        .unwrap();
    kernel.pause(PauseMode::Memory).await.unwrap();
    kernel.resume().await.unwrap();
    let before = kernel
        .run("len(ticks)")
        .await
        .unwrap()
        .text()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = kernel.run("(x + 1, len(ticks))").await.unwrap();
    let text = r.text().unwrap();
    assert!(text.starts_with("(42, "), "{text}");
    let ticks: u64 = text
        .trim_start_matches("(42, ")
        .trim_end_matches(')')
        .parse()
        .unwrap();
    assert!(
        ticks > before,
        "the kernel's thread goes on: {before} then {ticks}"
    );
    // Forked with its memory: each fork's context goes on with the
    // variables, and the forks diverge.
    kernel
        .run("import os\nbase = os.urandom(8).hex()")
        .await
        .unwrap();
    let parent_base = kernel
        .run("base")
        .await
        .unwrap()
        .text()
        .unwrap()
        .to_string();
    let forks = kernel.fork(2, PauseMode::Memory).await.unwrap();
    for (i, fork) in forks.iter().enumerate() {
        let r = fork.run(&format!("x = {i}\n(base, x + 41)")).await.unwrap();
        let text = r.text().unwrap_or_default().to_string();
        assert_eq!(text, format!("({parent_base}, {})", 41 + i), "{r:?}");
    }
    let r = kernel.run("x").await.unwrap();
    assert_eq!(
        r.text(),
        Some("41"),
        "the parent is not changed by its forks"
    );
    for fork in forks {
        fork.close().await.unwrap();
    }
    kernel.close().await.unwrap();

    // A kept session outlives its handle, paused, and resumes by id.
    let kept = client.session(gvisor().keep(true).name("kept-one"));
    kept.start().await.unwrap();
    kept.spawn(COUNTER, SpawnOptions::new()).await.unwrap();
    kept.write_file("kept.txt", b"k").await.unwrap();
    let (kept_token, _) = {
        tokio::time::sleep(Duration::from_millis(300)).await;
        count_in(&kept).await
    };
    let kept_id = kept.pause(PauseMode::Memory).await.unwrap().id;
    drop(kept);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let listed = client.kept_sessions().await.unwrap();
    let entry = listed.iter().find(|k| k.id == kept_id).expect("listed");
    assert_eq!(
        (entry.state.as_str(), entry.name.as_deref()),
        ("paused (memory)", Some("kept-one"))
    );
    let again = client
        .resume_session(&kept_id, SessionConfig::new())
        .await
        .unwrap();
    let (t, n) = count_in(&again).await;
    assert_eq!(t, kept_token);
    counts_on(&again, &kept_token, n).await;
    assert_eq!(again.read_file("kept.txt").await.unwrap(), b"k");
    again.close().await.unwrap();
    assert!(client
        .kept_sessions()
        .await
        .unwrap()
        .iter()
        .all(|k| k.id != kept_id));

    Box::pin(swapped_kept_checkpoints_are_refused(&daemon, &client)).await;

    // A checkpoint changed after the pause is refused, typed; the session
    // is removed cleanly and starts again.
    let paused = s.pause(PauseMode::Memory).await.unwrap();
    let dir = checkpoint_dir(&daemon, &paused.id);
    // The largest file: runsc's image of the memory.
    let victim = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_file())
        .max_by_key(|e| e.metadata().map(|m| m.len()).unwrap_or(0))
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&victim).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&victim, bytes).unwrap();
    let refused = s.resume().await.unwrap_err();
    assert!(
        matches!(
            &refused,
            Error::Checkpoint {
                operation: "resume",
                ..
            }
        ),
        "{refused:?}"
    );
    assert_eq!(s.state(), State::Error);
    wait_gone(&daemon, &paused.id).await;
    s.start().await.unwrap();
    assert_eq!(s.exec("echo fresh").await.unwrap().stdout, "fresh\n");

    // One session's checkpoint swapped into another's place is refused too.
    let other = client.session(gvisor());
    other.start().await.unwrap();
    other.write_file("who.txt", b"other").await.unwrap();
    let a = s.pause(PauseMode::Memory).await.unwrap();
    let b = other.pause(PauseMode::Memory).await.unwrap();
    let (a_dir, b_dir) = (
        checkpoint_dir(&daemon, &a.id),
        checkpoint_dir(&daemon, &b.id),
    );
    for entry in std::fs::read_dir(&b_dir).unwrap().flatten() {
        if entry.path().is_file() {
            std::fs::copy(entry.path(), a_dir.join(entry.file_name())).unwrap();
        }
    }
    assert!(matches!(
        s.resume().await.unwrap_err(),
        Error::Checkpoint {
            operation: "resume",
            ..
        }
    ));
    // The other one, untouched, resumes.
    other.resume().await.unwrap();
    assert_eq!(other.read_file("who.txt").await.unwrap(), b"other");
    other.close().await.unwrap();

    // A disk that fills while checkpointing: typed, and the session is
    // either still running or cleanly gone.
    let full = client.session(gvisor());
    full.start().await.unwrap();
    let id = full.describe().container_id.clone().unwrap();
    let small = daemon
        .dir()
        .join("data/containers")
        .join(&id)
        .join("checkpoints");
    std::fs::create_dir_all(&small).unwrap();
    assert!(std::process::Command::new("mount")
        // Smaller than any checkpoint (the static agent's alone is ~190 KB).
        .args(["-t", "tmpfs", "-o", "size=32k", "tmpfs"])
        .arg(&small)
        .status()
        .unwrap()
        .success());
    let failed = full.pause(PauseMode::Memory).await;
    // (Gone already when Docker removed the container with its mounts.)
    let _ = std::process::Command::new("umount")
        .arg(&small)
        .stderr(std::process::Stdio::null())
        .status();
    let failed = failed
        .map(|p| format!("{p:?}"))
        .inspect_err(|e| eprintln!("the failed pause: {:?}", e.to_string()));
    let failed = failed.expect_err("a pause onto a full disk failed");
    assert!(
        matches!(
            &failed,
            Error::Checkpoint {
                operation: "pause",
                ..
            }
        ),
        "{:?}",
        failed.to_string()
    );
    match full.state() {
        State::Idle => assert_eq!(full.exec("echo on").await.unwrap().stdout, "on\n"),
        State::Error => wait_gone(&daemon, &id).await,
        other => panic!("after a failed pause the session is {other}"),
    }
    full.close().await.unwrap();
    s.close().await.unwrap();

    Box::pin(resumes_never_reach_the_layer_limit(
        &daemon,
        &client,
        &base.reference,
    ))
    .await;

    // Nothing left: no session container, no fork image.
    let started = Instant::now();
    while daemon.containers_with_label("dev.dockhand.kind=session") > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "session containers left behind"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let images = std::process::Command::new("docker")
        .args([
            "-H",
            &daemon.endpoint,
            "images",
            "-q",
            "--filter",
            "label=dev.dockhand.kind=snapshot",
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&images.stdout).trim(),
        "",
        "fork images left behind"
    );
}

/// Two kept sessions' checkpoints swapped while no process holds them:
/// resumed by id (as a later process resumes them, from the seals kept in
/// the cache directory) each is refused, and resumes once put back.
async fn swapped_kept_checkpoints_are_refused(daemon: &SecondDaemon, client: &Client) {
    let mut kept_ids = Vec::new();
    for name in ["kept-a", "kept-b"] {
        let k = client.session(gvisor().keep(true).name(name));
        k.start().await.unwrap();
        k.write_file("who.txt", name.as_bytes()).await.unwrap();
        kept_ids.push(k.pause(PauseMode::Memory).await.unwrap().id);
    }
    let (a, b) = (
        checkpoint_dir(daemon, &kept_ids[0]),
        checkpoint_dir(daemon, &kept_ids[1]),
    );
    let swap = || {
        let aside = a.with_extension("aside");
        std::fs::rename(&a, &aside).unwrap();
        std::fs::rename(&b, &a).unwrap();
        std::fs::rename(&aside, &b).unwrap();
    };
    swap();
    for id in &kept_ids {
        match client.resume_session(id, SessionConfig::new()).await {
            Err(Error::Checkpoint { operation, .. }) => assert_eq!(operation, "resume"),
            other => panic!("a swapped checkpoint resumed: {:?}", other.map(|_| ())),
        }
    }
    swap();
    for (id, name) in kept_ids.iter().zip(["kept-a", "kept-b"]) {
        let k = client
            .resume_session(id, SessionConfig::new())
            .await
            .unwrap();
        assert_eq!(k.read_file("who.txt").await.unwrap(), name.as_bytes());
        k.close().await.unwrap();
    }
}

/// Each memory resume moves the session into a container of an image
/// committed from the paused one, a layer over the last: on an image
/// already 95 layers deep (Docker refuses past 125), the resumes flatten
/// it instead, and a session resumed many more times than the layers left
/// keeps its process, its files and a bounded depth.
async fn resumes_never_reach_the_layer_limit(daemon: &SecondDaemon, client: &Client, base: &str) {
    let deep = deep_image(daemon, base, 95);
    let depth = |image: &str| -> usize {
        let out = std::process::Command::new("docker")
            .args(["-H", &daemon.endpoint, "image", "inspect", "-f"])
            .args(["{{len .RootFS.Layers}}", image])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    assert!(
        depth(&deep) >= 95,
        "the deep image has {} layers",
        depth(&deep)
    );
    let leftovers_before = runtime_leftovers(daemon);
    let s = client.session(gvisor().image(ImageSpec::prebuilt(deep.clone())));
    s.start().await.unwrap();
    let spawned = s.spawn(COUNTER, SpawnOptions::new()).await.unwrap();
    let mut counter = Lines {
        events: spawned.events,
        buffer: String::new(),
    };
    let token = counter.next().await.split(' ').next().unwrap().to_string();
    let mut deepest = 0;
    for cycle in 0..8 {
        s.write_file(&format!("cycle-{cycle}.txt"), b"kept")
            .await
            .unwrap();
        s.pause(PauseMode::Memory).await.unwrap();
        s.resume()
            .await
            .unwrap_or_else(|e| panic!("resume {cycle}: {e}"));
        let image = common_image_of(daemon, &s.describe().container_id.unwrap());
        deepest = deepest.max(depth(&image));
    }
    eprintln!("8 memory resumes from a 95-layer image: the deepest image had {deepest} layers");
    assert!(deepest <= 97, "resumes stacked layers up to {deepest}");
    // The same process, counting on, and every file written on the way.
    let line = counter.next().await;
    assert!(line.starts_with(&token), "{line} is another process's");
    for cycle in 0..8 {
        assert_eq!(
            s.read_file(&format!("cycle-{cycle}.txt")).await.unwrap(),
            b"kept"
        );
    }
    s.close().await.unwrap();
    let _ = std::process::Command::new("docker")
        .args(["-H", &daemon.endpoint, "rmi", &deep])
        .output();
    // No shim process and no checkpoint copy of containerd's per resume.
    let started = Instant::now();
    let mut after = runtime_leftovers(daemon);
    while after > leftovers_before && started.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        after = runtime_leftovers(daemon);
    }
    eprintln!(
        "shims and containerd checkpoint copies: {leftovers_before:?} before, {after:?} after"
    );
    assert!(
        after.0 <= leftovers_before.0 && after.1 <= leftovers_before.1,
        "8 resumes left (shims, checkpoint copies) {after:?}, from {leftovers_before:?}"
    );
}

/// The daemon's runtime shim processes, and containerd's checkpoint copies
/// in the temporary directory (`ctrd-checkpoint*`).
fn runtime_leftovers(daemon: &SecondDaemon) -> (usize, usize) {
    let dir = daemon.dir().display().to_string();
    let shims = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|p| std::fs::read(p.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains("containerd-shim") && c.contains(&dir))
        .count();
    let copies = std::fs::read_dir(std::env::temp_dir())
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with("ctrd-checkpoint")
                })
                .count()
        })
        .unwrap_or(0);
    (shims, copies)
}

/// The image a container was made from.
fn common_image_of(daemon: &SecondDaemon, id: &str) -> String {
    let out = std::process::Command::new("docker")
        .args(["-H", &daemon.endpoint, "inspect", "-f", "{{.Image}}", id])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `base` with `extra` tiny layers on top, loaded into `daemon` (made from
/// `docker save`'s archive with the layers added, so no container runs).
fn deep_image(daemon: &SecondDaemon, base: &str, extra: usize) -> String {
    use std::io::Read;
    let tag = "dockhand-test/deep:latest".to_string();
    let dir = daemon.dir().join("deep-image");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let saved = dir.join("base.tar");
    let ok = std::process::Command::new("docker")
        .args(["-H", &daemon.endpoint, "save", "-o"])
        .arg(&saved)
        .arg(base)
        .status()
        .unwrap();
    assert!(ok.success(), "docker save");
    let mut entries: Vec<(String, Vec<u8>)> = Vec::new();
    let mut archive = tar::Archive::new(std::fs::File::open(&saved).unwrap());
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let path = entry.path().unwrap().to_string_lossy().into_owned();
        let mut data = Vec::new();
        entry.read_to_end(&mut data).unwrap();
        entries.push((path, data));
    }
    fn find(entries: &[(String, Vec<u8>)], name: &str) -> usize {
        entries.iter().position(|(p, _)| p == name).unwrap()
    }
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&entries[find(&entries, "manifest.json")].1).unwrap();
    let config_name = manifest[0]["Config"].as_str().unwrap().to_string();
    let mut config: serde_json::Value =
        serde_json::from_slice(&entries[find(&entries, &config_name)].1).unwrap();
    for n in 0..extra {
        let mut layer = tar::Builder::new(Vec::new());
        let body = format!("layer {n}\n");
        let mut header = tar::Header::new_gnu();
        header.set_size(body.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        layer
            .append_data(&mut header, format!("deep/{n}"), body.as_bytes())
            .unwrap();
        let layer = layer.into_inner().unwrap();
        let path = dir.join("layer.tar");
        std::fs::write(&path, &layer).unwrap();
        let sum = std::process::Command::new("sha256sum")
            .arg(&path)
            .output()
            .unwrap();
        let hex = String::from_utf8_lossy(&sum.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .to_string();
        let name = format!("deep{n}/layer.tar");
        config["rootfs"]["diff_ids"]
            .as_array_mut()
            .unwrap()
            .push(format!("sha256:{hex}").into());
        if let Some(history) = config["history"].as_array_mut() {
            history.push(serde_json::json!({"created": "2026-01-01T00:00:00Z", "created_by": format!("deep layer {n}")}));
        }
        manifest[0]["Layers"]
            .as_array_mut()
            .unwrap()
            .push(name.clone().into());
        entries.push((name, layer));
    }
    let new_config = serde_json::to_vec(&config).unwrap();
    let at = find(&entries, &config_name);
    entries[at].1 = new_config;
    manifest[0]["RepoTags"] = serde_json::json!([tag]);
    let at = find(&entries, "manifest.json");
    entries[at].1 = serde_json::to_vec(&manifest).unwrap();
    // The config's file name is its digest; Docker loads it by the manifest.
    let mut out = tar::Builder::new(Vec::new());
    for (path, data) in &entries {
        if path == "repositories" {
            continue;
        }
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        out.append_data(&mut header, path, data.as_slice()).unwrap();
    }
    let archive = dir.join("deep.tar");
    std::fs::write(&archive, out.into_inner().unwrap()).unwrap();
    let loaded = std::process::Command::new("docker")
        .args(["-H", &daemon.endpoint, "load", "-i"])
        .arg(&archive)
        .output()
        .unwrap();
    assert!(
        loaded.status.success(),
        "docker load: {}",
        String::from_utf8_lossy(&loaded.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
    tag
}

/// The lines of a spawned command's stdout.
struct Lines {
    events: futures::stream::BoxStream<'static, dockhand::Result<dockhand::session::ExecEvent>>,
    buffer: String,
}

impl Lines {
    async fn next(&mut self) -> String {
        loop {
            if let Some((line, rest)) = self.buffer.split_once('\n') {
                let line = line.to_string();
                self.buffer = rest.to_string();
                return line;
            }
            let event = tokio::time::timeout(Duration::from_secs(10), self.events.next())
                .await
                .expect("the process wrote nothing for 10 s")
                .expect("the stream ended")
                .unwrap();
            if let dockhand::session::ExecEvent::Stdout(b) = event {
                self.buffer.push_str(&String::from_utf8_lossy(&b));
            }
        }
    }
}

fn running(daemon: &SecondDaemon, id: &str) -> bool {
    let out = std::process::Command::new("docker")
        .args([
            "-H",
            &daemon.endpoint,
            "inspect",
            "-f",
            "{{.State.Running}}",
            id,
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim() == "true"
}

async fn wait_gone(daemon: &SecondDaemon, id: &str) {
    let started = Instant::now();
    loop {
        let out = std::process::Command::new("docker")
            .args(["-H", &daemon.endpoint, "inspect", id])
            .output()
            .unwrap();
        if !out.status.success() {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "container {id} left behind"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
