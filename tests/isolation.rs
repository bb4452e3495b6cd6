//! Runtime choice: a runtime the daemon lacks fails at once, typed, for every
//! kind of container, and nothing is created.

mod common;

use std::time::{Duration, Instant};

use dockhand::codemode::CodeHostConfig;
use dockhand::session::SessionConfig;
use dockhand::{CacheMode, Error, Isolation, Sandbox, State};

fn missing() -> Isolation {
    Isolation::Runtime("dockhand-no-such-runtime".into())
}

fn assert_unavailable(result: Result<impl std::fmt::Debug, Error>) {
    match result {
        Err(Error::RuntimeUnavailable {
            runtime,
            available,
            hint,
        }) => {
            assert_eq!(runtime, "dockhand-no-such-runtime");
            assert!(available.iter().any(|r| r == "runc"), "{available:?}");
            assert!(hint.contains("daemon.json"), "{hint}");
        }
        other => panic!("expected RuntimeUnavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn a_missing_runtime_fails_at_once_for_every_kind() {
    let client = common::client().await;
    let started = Instant::now();
    let sandbox = Sandbox::code("isolation-missing", "print(1)")
        .isolation(missing())
        .cache(CacheMode::Disable)
        .build()
        .unwrap();
    assert_unavailable(client.run(&sandbox, dockhand::NO_INPUTS).await);

    let session = client.session(
        SessionConfig::new()
            .isolation(missing())
            .name("isolation-missing"),
    );
    assert_unavailable(session.start().await);

    let host = client.code_host(CodeHostConfig::new().isolation(missing()));
    assert_unavailable(host.start().await);
    assert_eq!(host.state(), State::Error);
    assert!(started.elapsed() < Duration::from_secs(60));

    // gVisor's hint says how to install and register it.
    let gvisor = Sandbox::code("isolation-gvisor", "print(1)")
        .isolation(Isolation::Gvisor)
        .cache(CacheMode::Disable)
        .build()
        .unwrap();
    let runtimes = client.daemon_info().await.unwrap().runtimes;
    if !runtimes.iter().any(|r| r == "runsc") {
        match client.run(&gvisor, dockhand::NO_INPUTS).await {
            Err(e @ Error::RuntimeUnavailable { .. }) => {
                let text = e.to_string();
                assert!(text.contains("apt-get install runsc"), "{text}");
                assert!(text.contains("\"runsc\""), "{text}");
            }
            other => panic!("expected RuntimeUnavailable, got {other:?}"),
        }
    }
    assert_eq!(
        common::containers_with_label("dev.dockhand.sandbox=isolation-missing"),
        0
    );
    assert_eq!(
        common::containers_with_label("dev.dockhand.session-name=isolation-missing"),
        0
    );
}
