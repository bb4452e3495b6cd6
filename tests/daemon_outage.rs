//! The daemon dies under a run: a second dockerd of the test's own is
//! SIGKILLed while a one-shot runs on it. The run fails typed
//! (`DaemonUnreachable`) and promptly; when the daemon answers again, what
//! the run left (its container and volumes) is removed by the process that
//! made it, without anyone's help; the next run works.

mod common;
#[path = "common/second_daemon.rs"]
mod second_daemon;

use std::time::{Duration, Instant};

use dockhand::{CacheMode, Client, Error, ImageSpec, Sandbox, Type};
use second_daemon::SecondDaemon;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_dead_daemon_left_is_removed_when_it_answers_again() {
    let base = common::client()
        .await
        .resolve_image(&ImageSpec::default())
        .await
        .expect("the base image");
    let mut daemon = SecondDaemon::start("{}", &base.reference);
    let client = Client::builder()
        .endpoint(&daemon.endpoint)
        .cache_dir(
            std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("outage-{}", std::process::id())),
        )
        .connect()
        .await
        .expect("a client of the second daemon");
    let owned = format!("dev.dockhand.owner-pid={}", std::process::id());
    let sandboxes = |daemon: &SecondDaemon| {
        daemon.containers_with_label(&owned)
            - daemon.containers_with_label("dev.dockhand.kind=watchdog")
    };

    let slow = Sandbox::code("outage", "import time\ntime.sleep(60)\nresult = 1")
        .output("result", Type::Int)
        .cache(CacheMode::Disable)
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let running = {
        let (client, slow) = (client.clone(), slow.clone());
        tokio::spawn(async move { client.run(&slow, dockhand::NO_INPUTS).await })
    };
    let started = Instant::now();
    while daemon.containers_with_label("dev.dockhand.kind=sandbox") == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the run never started"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    daemon.kill();
    let killed = Instant::now();
    let outcome = tokio::time::timeout(Duration::from_secs(60), running)
        .await
        .expect("the run answers once its daemon is gone")
        .unwrap();
    eprintln!(
        "the run answered {:?} after the daemon died: {outcome:?}",
        killed.elapsed()
    );
    assert!(
        matches!(outcome, Err(Error::DaemonUnreachable { .. })),
        "{outcome:?}"
    );

    // The daemon comes back: the run's container goes, with no call made.
    daemon.restart();
    let back = Instant::now();
    while sandboxes(&daemon) > 0 && back.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(sandboxes(&daemon), 0, "the dead daemon's leftovers stay");
    while daemon.volumes_with_label("dev.dockhand.scratch") > 0
        && back.elapsed() < Duration::from_secs(60)
    {
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(
        daemon.volumes_with_label("dev.dockhand.scratch"),
        0,
        "the run's volumes stay"
    );
    eprintln!(
        "leftovers removed {:?} after the daemon answered",
        back.elapsed()
    );

    let quick = Sandbox::code("after-outage", "result = 6 * 7")
        .output("result", Type::Int)
        .cache(CacheMode::Disable)
        .build()
        .unwrap();
    let out = client
        .run(&quick, dockhand::NO_INPUTS)
        .await
        .expect("the next run");
    assert_eq!(out.get::<i64>("result").unwrap(), 42);
}
