//! Session settings shared with sandboxes and code hosts (image, limits,
//! env, secrets, network, hardening): they reach the container, and bad ones
//! fail the start and create nothing.

mod common;

use std::time::Duration;

use dockhand::session::{SessionApi, SessionConfig};
use dockhand::Error;

async fn started(config: SessionConfig) -> dockhand::session::Session {
    let client = common::client().await;
    let s = client.session(config);
    s.start().await.expect("session starts");
    s
}

/// The settings every configuration shares, on a session: memory as text,
/// cpus, pids, network as a bool, a default timeout, and secrets as an env
/// var and a file, redacted from what commands print.
#[tokio::test]
async fn shared_settings_and_secrets_reach_the_container() {
    use dockhand::{Hardening, Secret};
    let config = SessionConfig::new()
        .memory("200Mi")
        .cpus(0.5)
        .pids(64)
        .network(false)
        .timeout(Duration::from_secs(1))
        .hardening(Hardening::default().writable_root().tmp_size("32Mi"))
        .secret(Secret::value("API_TOKEN", "tok-3141592653"))
        .secret(Secret::value("DB_PASSWORD", "pw-2718281828").as_file());
    let s = started(config).await;
    let d = s.describe();
    assert_eq!((d.memory_bytes, d.cpus), (200 << 20, 0.5));
    let id = d.container_id.clone().unwrap();
    let inspect = common::docker(&[
        "inspect",
        "-f",
        "{{.HostConfig.Memory}} {{.HostConfig.NanoCpus}} {{.HostConfig.PidsLimit}} {{.HostConfig.NetworkMode}}",
        &id,
    ]);
    assert_eq!(inspect.trim(), format!("{} 500000000 64 none", 200 << 20));

    let r = s
        .exec("echo \"$API_TOKEN\"; cat /run/secrets/DB_PASSWORD; echo; stat -c %a /run/secrets/DB_PASSWORD")
        .await
        .unwrap();
    assert_eq!(
        r.stdout, "[redacted:API_TOKEN]\n[redacted:DB_PASSWORD]\n400\n",
        "the code sees the values; what comes back is redacted"
    );
    // The code has the real value: its length survives redaction.
    let r = s.exec("printf %s \"$API_TOKEN\" | wc -c").await.unwrap();
    assert_eq!(r.stdout.trim(), "14");
    // The default timeout holds and its error redacts too.
    match s.exec("echo $API_TOKEN; sleep 10").await {
        Err(Error::CommandTimeout {
            timeout, stdout, ..
        }) => {
            assert_eq!(timeout, Duration::from_secs(1));
            assert_eq!(stdout, "[redacted:API_TOKEN]\n");
        }
        other => panic!("expected CommandTimeout, got {other:?}"),
    }
    let debug = format!(
        "{:?}",
        SessionConfig::new().secret(Secret::value("K", "hidden-value-9"))
    );
    assert!(!debug.contains("hidden-value-9"), "{debug}");
    s.close().await.unwrap();
    common::wait_gone(&id).await;
}

/// Bad settings fail `start` with a clear error before anything is created.
#[tokio::test]
async fn bad_settings_fail_the_start_and_create_nothing() {
    use dockhand::Secret;
    let client = common::client().await;
    let cases: Vec<(SessionConfig, &str)> = vec![
        (SessionConfig::new().memory("lots"), "lots"),
        (SessionConfig::new().memory(1024u64), "6Mi"),
        (SessionConfig::new().cpus(0.0), "cpus"),
        (SessionConfig::new().pids(1), "pids"),
        (SessionConfig::new().env("1BAD", "x"), "1BAD"),
        (
            SessionConfig::new()
                .env("K", "x")
                .secret(Secret::value("K", "y")),
            "both a secret and an env var",
        ),
        (
            SessionConfig::new().secret(Secret::from_env("T", "DOCKHAND_SURELY_UNSET_VAR_42")),
            "DOCKHAND_SURELY_UNSET_VAR_42",
        ),
    ];
    for (config, says) in cases {
        let s = client.session(config.name("bad-settings"));
        match s.start().await {
            Err(e @ Error::InvalidSpec { .. }) => {
                assert!(e.to_string().contains(says), "{e} should say {says}")
            }
            other => panic!("expected InvalidSpec saying {says}, got {other:?}"),
        }
    }
    assert_eq!(
        common::containers_with_label("dev.dockhand.session-name=bad-settings"),
        0
    );
}
