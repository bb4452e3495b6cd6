//! Pause and resume on files, forks on files, kept sessions and volumes,
//! on the real daemon (memory mode: tests/persistence_memory.rs).

mod common;

use std::time::{Duration, Instant};

use dockhand::session::{PauseMode, SessionApi, SessionConfig, SpawnOptions};
use dockhand::{Error, FileErrorKind, State, Volume};

/// Waits until `docker inspect` no longer finds `id`.
async fn gone(id: &str) {
    let started = Instant::now();
    while common::container_exists(id) {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "container {id} left behind"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn running(id: &str) -> bool {
    common::docker(&["inspect", "-f", "{{.State.Running}}", id]).trim() == "true"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filesystem_pause_keeps_files_and_ends_processes() {
    let client = common::client().await;

    // Not made pausable: refused, typed, and it runs on.
    let plain = client.session(SessionConfig::new());
    plain.start().await.unwrap();
    let refused = plain.pause(PauseMode::Filesystem).await.unwrap_err();
    assert!(
        matches!(&refused, Error::InvalidSpec { .. }) && refused.to_string().contains("pausable"),
        "{refused}"
    );
    assert_eq!(plain.exec("echo on").await.unwrap().stdout, "on\n");
    plain.close().await.unwrap();

    let s = client.session(SessionConfig::new().pausable(true));
    s.start().await.unwrap();
    s.write_file("notes/a.txt", b"kept").await.unwrap();
    s.exec("mkdir -p /tmp/t && echo tmp > /tmp/t/b")
        .await
        .unwrap();
    let spawned = s.spawn("sleep 600", SpawnOptions::new()).await.unwrap();

    // Busy: refused.
    let busy = {
        let s = s.clone();
        tokio::spawn(async move { s.exec("sleep 2").await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(matches!(
        s.pause(PauseMode::Filesystem).await.unwrap_err(),
        Error::InvalidTransition { .. }
    ));
    busy.await.unwrap().unwrap();

    let started = Instant::now();
    let paused = s.pause(PauseMode::Filesystem).await.unwrap();
    let pause_took = started.elapsed();
    assert_eq!(
        (paused.mode, s.state(), s.paused_mode()),
        (
            PauseMode::Filesystem,
            State::Paused,
            Some(PauseMode::Filesystem)
        )
    );
    assert!(!running(&paused.id), "a paused container runs nothing");
    assert!(matches!(
        s.read_file("notes/a.txt").await.unwrap_err(),
        Error::SessionUnavailable { .. }
    ));
    // The process spawned before the pause ended with it.
    let mut events = spawned.events;
    let ended = tokio::time::timeout(Duration::from_secs(10), async {
        use futures::StreamExt;
        while let Some(event) = events.next().await {
            if event.is_err() || matches!(event, Ok(dockhand::session::ExecEvent::Exit(_))) {
                return;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the spawned process's stream did not end");
    // Resuming twice, or pausing a paused one: typed.
    assert!(matches!(
        s.pause(PauseMode::Filesystem).await.unwrap_err(),
        Error::InvalidTransition { .. }
    ));
    let started = Instant::now();
    s.resume().await.unwrap();
    eprintln!(
        "filesystem pause {pause_took:?}, resume {:?}",
        started.elapsed()
    );
    assert!(matches!(
        s.resume().await.unwrap_err(),
        Error::InvalidTransition { .. }
    ));
    assert_eq!(s.read_file("notes/a.txt").await.unwrap(), b"kept");
    assert_eq!(s.exec("cat /tmp/t/b").await.unwrap().stdout, "tmp\n");
    assert_eq!(
        s.exec("pgrep -x sleep || echo none").await.unwrap().stdout,
        "none\n"
    );

    // A paused session closes cleanly.
    let id = s.pause(PauseMode::Filesystem).await.unwrap().id;
    s.close().await.unwrap();
    gone(&id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_forks_diverge_and_leave_nothing() {
    let client = common::client().await;
    let s = client.session(
        SessionConfig::new()
            .pausable(true)
            .setup_command("echo setup >> ran.txt"),
    );
    s.start().await.unwrap();
    s.write_file("state.txt", b"base").await.unwrap();
    let started = Instant::now();
    let forks = s.fork(3, PauseMode::Filesystem).await.unwrap();
    eprintln!("filesystem fork to 3: {:?}", started.elapsed());
    assert_eq!(forks.len(), 3);
    // (The image by name: other tests of this binary fork at the same time.)
    let image = forks[0]
        .config()
        .image_spec()
        .prebuilt_reference()
        .expect("forks start from an image")
        .to_string();
    // The setup ran once, in the parent.
    assert_eq!(forks[0].read_file("ran.txt").await.unwrap(), b"setup\n");
    forks[0].write_file("state.txt", b"zero").await.unwrap();
    s.write_file("state.txt", b"parent").await.unwrap();
    assert_eq!(forks[1].read_file("state.txt").await.unwrap(), b"base");
    assert_eq!(forks[2].read_file("state.txt").await.unwrap(), b"base");
    assert_eq!(forks[0].read_file("state.txt").await.unwrap(), b"zero");
    assert_eq!(s.read_file("state.txt").await.unwrap(), b"parent");
    // A fork of a paused parent works too.
    s.pause(PauseMode::Filesystem).await.unwrap();
    assert!(s.fork(0, PauseMode::Filesystem).await.is_err());
    s.resume().await.unwrap();
    for fork in forks {
        fork.close().await.unwrap();
    }
    assert!(
        common::docker(&["images", "-q", &image]).trim().is_empty(),
        "the fork image {image} goes with the last fork"
    );
    s.close().await.unwrap();
}

/// The kept session `id`, taken over by this process, its file as written.
async fn taken_over(client: &dockhand::Client, id: &str) -> dockhand::session::Session {
    let session = client
        .resume_session(id, SessionConfig::new())
        .await
        .unwrap();
    assert_eq!(
        session.read_file("work.txt").await.unwrap(),
        b"from the first owner"
    );
    session
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_session_outlives_its_handle_and_resumes_by_id() {
    let client = common::client().await;
    let kept = client.session(SessionConfig::new().keep(true).name("kept-files"));
    kept.start().await.unwrap();
    kept.write_file("work.txt", b"from the first owner")
        .await
        .unwrap();
    let id = kept.describe().container_id.unwrap();
    let sleeper = kept
        .spawn("sleep 600", SpawnOptions::new())
        .await
        .unwrap()
        .pid;
    drop(kept);
    // It runs on without its handle, its processes too.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(running(&id), "a kept session runs on without its owner");
    let listed = client.kept_sessions().await.unwrap();
    let entry = listed.iter().find(|k| k.id == id).expect("listed");
    assert_eq!(entry.state, "running");
    // reap leaves it.
    client.reap().await.unwrap();
    assert!(common::container_exists(&id));

    // Another owner attaches to it: the same processes, the same files.
    let again = taken_over(&client, &id).await;
    // While it holds it, no other client takes it over.
    match client.resume_session(&id, SessionConfig::new()).await {
        Err(Error::SessionUnavailable { reason }) => assert!(reason.contains("held"), "{reason}"),
        other => panic!(
            "a held kept session was taken over: {:?}",
            other.map(|_| ())
        ),
    }
    let alive = again
        .exec(&format!("kill -0 {sleeper} && echo alive"))
        .await
        .unwrap();
    assert_eq!(alive.stdout, "alive\n", "{alive:?}");
    // A command this owner leaves running keeps its request id: the next
    // owner numbers past it, so none of its requests gets that output.
    again
        .spawn(
            "while true; do echo tick; sleep 0.05; done",
            SpawnOptions::new(),
        )
        .await
        .unwrap();
    drop(again);
    let again = taken_over(&client, &id).await;
    for _ in 0..5 {
        let mut spawned = again
            .spawn("sleep 0.3; echo clean", SpawnOptions::new())
            .await
            .unwrap();
        let mut out = Vec::new();
        while let Some(event) = futures::StreamExt::next(&mut spawned.events).await {
            match event.unwrap() {
                dockhand::session::ExecEvent::Stdout(b) => out.extend_from_slice(&b),
                dockhand::session::ExecEvent::Exit(_) => break,
                _ => {}
            }
        }
        assert_eq!(String::from_utf8_lossy(&out), "clean\n");
    }

    // Paused on its files and dropped: listed as stopped, resumed by id.
    again.pause(PauseMode::Filesystem).await.unwrap();
    drop(again);
    let listed = client.kept_sessions().await.unwrap();
    let entry = listed.iter().find(|k| k.id == id).expect("listed");
    assert_eq!(entry.state, "stopped (files)");
    assert!(entry.since.is_some());
    let again = taken_over(&client, &id).await;
    // An unknown id, or a container that is not a kept session: typed.
    let watchdog = common::docker(&["ps", "-q", "--filter", "label=dev.dockhand.kind=watchdog"]);
    for bad in ["no-such-container", watchdog.trim()] {
        if bad.is_empty() {
            continue;
        }
        assert!(matches!(
            client
                .resume_session(bad, SessionConfig::new())
                .await
                .unwrap_err(),
            Error::SessionUnavailable { .. }
        ));
    }
    again.close().await.unwrap();
    gone(&id).await;
    assert!(client
        .kept_sessions()
        .await
        .unwrap()
        .iter()
        .all(|k| k.id != id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_outlive_sessions_and_mount_read_only_in_many() {
    let client = common::client().await;
    let name = format!("test-{}", std::process::id());
    // A missing volume, or a bad name: typed, before anything is made.
    let missing = client.session(SessionConfig::new().volume(&name, "/data"));
    assert!(matches!(
        missing.start().await.unwrap_err(),
        Error::InvalidSpec { .. }
    ));
    assert!(matches!(
        Volume::create(&client, "../etc").await.unwrap_err(),
        Error::InvalidSpec { .. }
    ));
    let volume = Volume::create(&client, &name).await.unwrap();
    assert!(Volume::create(&client, &name).await.is_err(), "made twice");
    assert!(Volume::list(&client).await.unwrap().contains(&volume));

    let writer = client.session(SessionConfig::new().volume(&name, "/data"));
    writer.start().await.unwrap();
    writer
        .write_file("/data/rows.csv", b"a,b\n1,2\n")
        .await
        .unwrap();
    writer.close().await.unwrap();

    let readers: Vec<_> = (0..2)
        .map(|_| client.session(SessionConfig::new().volume_read_only(&name, "/data")))
        .collect();
    for r in &readers {
        r.start().await.unwrap();
        assert_eq!(r.read_file("/data/rows.csv").await.unwrap(), b"a,b\n1,2\n");
        let refused = r
            .write_file("/data/rows.csv", b"changed")
            .await
            .unwrap_err();
        assert!(
            matches!(
                &refused,
                Error::SessionFile {
                    kind: FileErrorKind::ReadOnly | FileErrorKind::PermissionDenied,
                    ..
                }
            ),
            "{refused:?}"
        );
        let shell = r.exec("echo x > /data/new.txt").await.unwrap();
        assert_ne!(shell.exit_code, 0, "a read-only volume took a write");
    }
    // Mounted: removal refused, typed; the volume stays.
    assert!(matches!(
        volume.remove(&client).await.unwrap_err(),
        Error::InvalidSpec { .. }
    ));
    for r in readers {
        r.close().await.unwrap();
    }
    volume.remove(&client).await.unwrap();
    assert!(Volume::get(&client, &name).await.unwrap().is_none());
    assert_eq!(
        common::docker(&[
            "volume",
            "ls",
            "-q",
            "--filter",
            &format!("name=dockhand-volume-{name}")
        ])
        .trim(),
        ""
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kernel_paused_on_files_keeps_files_and_starts_afresh() {
    let kernel = common::kernel(common::kernel_config().session(|c| c.pausable(true))).await;
    kernel
        .run("x = 1\nopen('kept.txt', 'w').write('k')")
        .await
        .unwrap();
    kernel.pause(PauseMode::Filesystem).await.unwrap();
    kernel.resume().await.unwrap();
    let r = kernel
        .run("print(open('kept.txt').read()); x")
        .await
        .unwrap();
    assert!(
        r.error.as_ref().is_some_and(|e| e.name == "NameError"),
        "{r:?}"
    );
    assert_eq!(r.stdout, "k\n");
    kernel.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_kernel_taken_over_keeps_its_contexts_variables() {
    let config = common::kernel_config().session(|c| c.keep(true).name("kept-kernel"));
    let client = common::client().await;
    let kernel = client.kernel(config.clone());
    kernel.start().await.unwrap();
    kernel.run("x = 41\nimport json").await.unwrap();
    kernel.create_context("other").await.unwrap();
    kernel
        .run_with(
            "y = 'second'",
            dockhand::kernel::RunOptions::new().context("other"),
        )
        .await
        .unwrap();
    let id = kernel.session().describe().container_id.unwrap();
    drop(kernel);

    // Another owner takes it over: the same kernels, their variables and
    // imports, in both contexts.
    let again = client.kept_kernel(&id, config).await.unwrap();
    again.resume().await.unwrap();
    let mut names = again.contexts();
    names.sort();
    assert_eq!(names, ["default", "other"]);
    let r = again.run("json.dumps(x + 1)").await.unwrap();
    assert_eq!(r.text(), Some("'42'"), "{r:?}");
    let r = again
        .run_with("y", dockhand::kernel::RunOptions::new().context("other"))
        .await
        .unwrap();
    assert_eq!(r.text(), Some("'second'"), "{r:?}");
    // A new context beside them works too.
    again.create_context("third").await.unwrap();
    let r = again
        .run_with(
            "1 + 1",
            dockhand::kernel::RunOptions::new().context("third"),
        )
        .await
        .unwrap();
    assert_eq!(r.text(), Some("2"), "{r:?}");
    again.close().await.unwrap();
    gone(&id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kernel_forked_on_files_gives_kernels_with_the_files() {
    let kernel = common::kernel(common::kernel_config().session(|c| c.pausable(true))).await;
    kernel
        .run("x = 1\nopen('base.txt', 'w').write('base')")
        .await
        .unwrap();
    let forks = kernel.fork(2, PauseMode::Filesystem).await.unwrap();
    forks[0]
        .run("open('base.txt', 'w').write('changed')")
        .await
        .unwrap();
    let r = forks[1].run("open('base.txt').read()").await.unwrap();
    assert_eq!(r.text(), Some("'base'"), "{r:?}");
    // Files, not memory: a fork's context starts afresh.
    let r = forks[1].run("x").await.unwrap();
    assert!(
        r.error.as_ref().is_some_and(|e| e.name == "NameError"),
        "{r:?}"
    );
    let r = kernel.run("x + 1").await.unwrap();
    assert_eq!(r.text(), Some("2"), "the parent runs on");
    for fork in forks {
        fork.close().await.unwrap();
    }
    kernel.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_pauses_itself_and_the_next_request_resumes_it() {
    let client = common::client().await;
    let s = client.session(
        SessionConfig::new().auto_pause(Duration::from_millis(400), PauseMode::Filesystem),
    );
    s.start().await.unwrap();
    s.write_file("kept.txt", b"idle").await.unwrap();
    let started = Instant::now();
    // Paused once its container is stopped (the state says `paused` from
    // the pause's start).
    while s.paused_mode().is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the idle session never paused"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(s.state(), State::Paused);
    let id = s.describe().container_id.unwrap();
    assert!(!running(&id), "paused: its container is stopped");
    // The next request resumes it, and waits for that.
    assert_eq!(s.read_file("kept.txt").await.unwrap(), b"idle");
    assert_eq!(s.state(), State::Idle);
    assert_eq!(s.exec("echo on").await.unwrap().stdout, "on\n");
    s.close().await.unwrap();
    gone(&id).await;
}

/// Whether any image's saved bytes (`docker save`) hold `needle`.
fn saved_image_holds(image: &str, needle: &[u8]) -> bool {
    let path = std::env::temp_dir().join(format!(
        "dockhand-saved-{}-{}.tar",
        std::process::id(),
        image.replace(['/', ':'], "-")
    ));
    common::docker(&["save", "-o", path.to_str().unwrap(), image]);
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(bytes.len() > 1 << 20, "docker save wrote the image");
    bytes.windows(needle.len()).any(|w| w == needle)
}

/// The `Env` of an image as `docker image inspect` shows it.
fn image_env(image: &str) -> Vec<String> {
    let json = common::docker(&["image", "inspect", "-f", "{{json .Config.Env}}", image]);
    serde_json::from_str(json.trim()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_given_as_variables_are_in_no_committed_image() {
    let client = common::client().await;
    let value = format!(
        "dh-image-secret-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let s = client.session(
        SessionConfig::new()
            .pausable(true)
            .env("PLAIN_SETTING", "kept")
            .secret(dockhand::Secret::value("DH_IMAGE_SECRET", value.clone())),
    );
    s.start().await.unwrap();
    let sees = |s: dockhand::session::Session, value: String| async move {
        let r = s
            .exec(&format!(
                "test \"$DH_IMAGE_SECRET\" = '{value}' && echo same"
            ))
            .await
            .unwrap();
        r.stdout.trim() == "same"
    };
    assert!(
        sees(s.clone(), value.clone()).await,
        "the session has its secret"
    );
    // A snapshot: the plain setting is in it, the secret nowhere (neither
    // its configuration nor the container's it records, nor any layer).
    let snapshot = s.snapshot().await.unwrap();
    let env = image_env(&snapshot.image);
    assert!(env.contains(&"PLAIN_SETTING=kept".to_string()), "{env:?}");
    assert!(
        !env.iter().any(|e| e.contains("DH_IMAGE_SECRET")),
        "{env:?}"
    );
    let inspected = common::docker(&["image", "inspect", &snapshot.image]);
    assert!(!inspected.contains(&value), "docker image inspect shows it");
    // A snapshot outlives its process: it names no owner (a fork's image,
    // below, names this one).
    let owner_of = |image: &str| {
        common::docker(&[
            "image",
            "inspect",
            "-f",
            "{{index .Config.Labels \"dev.dockhand.owner-pid\"}}",
            image,
        ])
        .trim()
        .to_string()
    };
    assert_eq!(owner_of(&snapshot.image), "", "a snapshot's owner");
    assert!(
        !saved_image_holds(&snapshot.image, value.as_bytes()),
        "the secret's value is in the saved snapshot"
    );
    // A fork's image likewise; the fork itself has the secret again.
    let forks = s.fork(1, PauseMode::Filesystem).await.unwrap();
    let fork_image = forks[0]
        .config()
        .image_spec()
        .prebuilt_reference()
        .unwrap()
        .to_string();
    assert!(!image_env(&fork_image).iter().any(|e| e.contains(&value)));
    assert_eq!(owner_of(&fork_image), std::process::id().to_string());
    assert!(
        sees(forks[0].clone(), value.clone()).await,
        "the fork has its secret"
    );
    // A session started from the snapshot without the secret has none.
    let from_snapshot = client
        .session(SessionConfig::new().image(dockhand::ImageSpec::prebuilt(snapshot.image.clone())));
    from_snapshot.start().await.unwrap();
    let r = from_snapshot
        .exec("echo \"[$DH_IMAGE_SECRET]\"")
        .await
        .unwrap();
    assert_eq!(r.stdout.trim(), "[]");
    // The snapshot removed while a session runs from it: its image stays
    // (untagged) while the session needs it, and goes with the session.
    let image_exists = |id: &str| {
        std::process::Command::new("docker")
            .args(["image", "inspect", id])
            .output()
            .unwrap()
            .status
            .success()
    };
    client.remove_snapshot(&snapshot).await.unwrap();
    assert!(image_exists(&snapshot.id), "kept for the session from it");
    from_snapshot.close().await.unwrap();
    assert!(
        !image_exists(&snapshot.id),
        "the removed snapshot's image outlived the last session from it"
    );
    for fork in forks {
        fork.close().await.unwrap();
    }
    s.close().await.unwrap();
}

/// The images labelled as made from container `id` (forks, snapshots).
fn images_made_from(id: &str) -> Vec<String> {
    common::docker(&[
        "images",
        "-q",
        "--filter",
        &format!("label=dev.dockhand.snapshot-of={id}"),
    ])
    .lines()
    .map(str::to_string)
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_fork_leaves_no_image_and_no_container() {
    let client = common::client().await;
    let name = format!("dropped-fork-{}", std::process::id());
    let s = client.session(SessionConfig::new().pausable(true).name(name.clone()));
    s.start().await.unwrap();
    s.write_file("state.txt", b"base").await.unwrap();
    let parent = s.describe().container_id.unwrap();
    let named = format!("dev.dockhand.session-name={name}");
    // Dropped at several points: during the commit, while forks start.
    for after in [20u64, 300, 900] {
        let forking = s.fork(2, PauseMode::Filesystem);
        let _ = tokio::time::timeout(Duration::from_millis(after), forking).await;
        let dropped = Instant::now();
        loop {
            let images = images_made_from(&parent);
            // The parent and the forks carry its name.
            let forks = common::containers_with_label(&named).saturating_sub(1);
            if images.is_empty() && forks == 0 {
                break;
            }
            assert!(
                dropped.elapsed() < Duration::from_secs(40),
                "{after} ms: images {images:?} and {forks} fork containers left"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        // The parent goes on as before.
        assert_eq!(s.read_file("state.txt").await.unwrap(), b"base");
    }
    s.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_pause_or_resume_leaves_the_session_usable() {
    let client = common::client().await;
    let s = client.session(SessionConfig::new().pausable(true));
    s.start().await.unwrap();
    s.write_file("kept.txt", b"kept").await.unwrap();
    for after in [1u64, 100, 400] {
        let pausing = s.pause(PauseMode::Filesystem);
        let _ = tokio::time::timeout(Duration::from_millis(after), pausing).await;
        // Whatever the drop cut short runs to its end: paused and
        // resumable, or running on.
        let waited = Instant::now();
        while s.state() != dockhand::State::Paused && s.state() != dockhand::State::Idle {
            assert!(
                waited.elapsed() < Duration::from_secs(30),
                "{:?}",
                s.state()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if s.state() == dockhand::State::Paused {
            while s.paused_mode().is_none() {
                assert!(waited.elapsed() < Duration::from_secs(30));
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let resuming = s.resume();
            let _ = tokio::time::timeout(Duration::from_millis(after), resuming).await;
            // The dropped resume finishes on its own; a resume asked for
            // meanwhile either does it or finds it done.
            while s.state() != dockhand::State::Idle {
                assert!(
                    waited.elapsed() < Duration::from_secs(30),
                    "a dropped resume left {:?}",
                    s.state()
                );
                if s.state() == dockhand::State::Paused && s.paused_mode().is_some() {
                    match s.resume().await {
                        Ok(()) | Err(Error::InvalidTransition { .. }) => {}
                        Err(e) => panic!("resume after a dropped resume: {e:?}"),
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        assert_eq!(
            s.read_file("kept.txt").await.unwrap(),
            b"kept",
            "{after} ms"
        );
        assert_eq!(s.exec("echo on").await.unwrap().stdout, "on\n");
    }
    s.close().await.unwrap();
}
