//! Sessions and code hosts on the Kubernetes backend against a SIMULATED
//! API server (tests/kube/fake_api), with a scripted session agent and a
//! scripted bridge behind the pods' attach streams.
//!
//! These are simulations: no control plane can run on this machine. What
//! is checked is the backend's request flow (a session's ConfigMap, Secret
//! and pod, handed over in order; a code host's pod; the attach streams;
//! the `hello` that asks a running agent or bridge to say `ready` again; a
//! tool call crossing the stream to the host and back), how the cluster's
//! answers become typed errors, and that nothing stays behind. The real
//! agent and bridge speak the same protocols on Docker (tests/session.rs,
//! tests/codemode.rs) and on a real cluster (tests/kube_cluster.rs).

#[path = "kube/mod.rs"]
mod sim;

use std::time::Duration;

use dockhand::codemode::{CodeHostConfig, MountMode};
use dockhand::session::{SessionApi, SessionConfig};
use dockhand::{ClusterError, Egress, Error, ImageSpec, Secret};
use serde_json::{json, Value};
use sim::fake_api::Script;
use sim::{add_tool, assert_no_pods_left, position, with_script, IMAGE};

fn config() -> SessionConfig {
    SessionConfig::new()
        .image(ImageSpec::prebuilt(IMAGE))
        .name("work")
}

/// Waits (bounded) until no ConfigMap or Secret is left in the namespace.
async fn assert_no_companions_left(fake: &sim::fake_api::Shared) {
    for _ in 0..300 {
        if fake.record(|r| r.config_maps.is_empty() && r.secrets.is_empty()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let left = fake.record(|r| {
        (
            r.config_maps.keys().cloned().collect::<Vec<_>>(),
            r.secrets.keys().cloned().collect::<Vec<_>>(),
        )
    });
    panic!("companions left behind: {left:?}");
}

fn only_pod(fake: &sim::fake_api::Shared) -> (String, Value) {
    fake.record(|r| {
        assert_eq!(r.pods.len(), 1, "{:?}", r.pods.keys().collect::<Vec<_>>());
        let (name, pod) = r.pods.iter().next().unwrap();
        (name.clone(), pod.clone())
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_session_is_a_pod_spoken_to_over_its_attach_stream_and_leaves_nothing() {
    let (client, fake) = with_script(Script::idle()).await;
    let session = client.session(config());
    session
        .start()
        .await
        .expect("the session starts on the cluster");

    let hello = session.exec("echo hello from the pod").await.unwrap();
    assert_eq!(hello.exit_code, 0);
    assert_eq!(hello.stdout, "hello from the pod\n");
    let failed = session.exec("exit 3").await.unwrap();
    assert_eq!(failed.exit_code, 3);
    let missing = session.exec("no-such-tool --flag").await.unwrap();
    assert_eq!(missing.exit_code, 127);
    assert!(missing.stderr.contains("not found"), "{}", missing.stderr);

    session
        .write_file("notes.txt", b"line one\n")
        .await
        .unwrap();
    assert_eq!(session.read_file("notes.txt").await.unwrap(), b"line one\n");
    let absent = session.read_file("absent.txt").await.unwrap_err();
    assert!(matches!(absent, Error::SessionFile { .. }), "{absent:?}");

    // The pod: the agent on an open stdin (closed after the first attach),
    // offline by the namespace's shared policy, owned by this process's lease.
    let (name, pod) = only_pod(&fake);
    assert_eq!(
        session.describe().container_id.as_deref(),
        Some(name.as_str())
    );
    let agent = &pod["spec"]["containers"][0];
    assert_eq!(agent["name"], json!("agent"));
    assert_eq!(agent["stdin"], json!(true));
    assert_eq!(agent["stdinOnce"], json!(true));
    assert_eq!(
        pod["metadata"]["labels"]["dev.dockhand.network"],
        json!("none")
    );
    assert_eq!(
        pod["metadata"]["ownerReferences"][0]["kind"],
        json!("Lease")
    );
    assert_eq!(pod["spec"]["restartPolicy"], json!("Never"));

    // Its agent comes from the agent's image, copied into a volume of the
    // pod by an init container running as the session's user; the image
    // itself needs no interpreter, and no ConfigMap is made for it.
    let install = &pod["spec"]["initContainers"][0];
    assert_eq!(install["name"], json!("install-agent"));
    assert!(
        install["image"]
            .as_str()
            .unwrap()
            .starts_with("dockhand/agent:"),
        "{install}"
    );
    assert_eq!(
        install["args"],
        json!(["--install-to", "/.dockhand-agent/session-agent"])
    );
    assert_eq!(
        install["securityContext"]["runAsUser"],
        agent["securityContext"]["runAsUser"]
    );
    assert_eq!(agent["command"], json!(["/.dockhand-agent/session-agent"]));
    let mounted = agent["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"] == json!("/.dockhand-agent"))
        .expect("the agent's volume");
    assert_eq!(mounted["readOnly"], json!(true));
    assert!(fake.record(|r| r.config_maps.is_empty()));

    let requests = fake.record(|r| r.requests.clone());
    let pod_made = position(&requests, 0, |r| {
        r.starts_with("POST /api/v1/namespaces/sim/pods")
    });
    let attach = position(&requests, pod_made, |r| {
        r.starts_with(&format!("GET /api/v1/namespaces/sim/pods/{name}/attach"))
    });
    for stream in [
        "container=agent",
        "stdin=true",
        "stdout=true",
        "stderr=true",
    ] {
        assert!(requests[attach].contains(stream), "{}", requests[attach]);
    }
    // The agent's first request is the hello.
    let asked = fake.record(|r| r.agent_requests.clone());
    assert_eq!(asked[0].1["type"], json!("hello"), "{asked:?}");

    session.close().await.unwrap();
    assert_no_pods_left(&fake).await;
    assert_no_companions_left(&fake).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_session_secrets_travel_in_a_secret_object_never_in_the_pod() {
    let (client, fake) = with_script(Script::idle()).await;
    let session = client.session(config().secret(Secret::value("TOKEN", "s3cr3t-session-9876")));
    session.start().await.unwrap();
    let env = session.exec("printenv TOKEN").await.unwrap();
    assert!(env.stdout.contains("secretKeyRef"), "{}", env.stdout);
    let (_, pod) = only_pod(&fake);
    assert!(
        !pod.to_string().contains("s3cr3t-session-9876"),
        "the value is not in the pod spec"
    );
    let secret = fake.record(|r| r.secrets.values().next().cloned().expect("a Secret"));
    assert_eq!(secret["stringData"]["TOKEN"], json!("s3cr3t-session-9876"));
    assert_eq!(
        secret["metadata"]["ownerReferences"][0]["kind"],
        json!("Pod")
    );
    let debug = format!("{session:?}");
    assert!(!debug.contains("s3cr3t-session-9876"), "{debug}");
    session.close().await.unwrap();
    assert_no_pods_left(&fake).await;
    assert_no_companions_left(&fake).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_session_pod_deleted_from_outside_is_unavailable_and_start_brings_it_back() {
    let (client, fake) = with_script(Script::idle()).await;
    let session = client.session(config());
    session.start().await.unwrap();
    let (name, _) = only_pod(&fake);
    fake.remove_pod(&name);

    let err = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match session.exec("echo still there?").await {
                Ok(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                Err(e) => break e,
            }
        }
    })
    .await
    .expect("the loss is noticed within seconds");
    assert!(matches!(err, Error::SessionUnavailable { .. }), "{err:?}");
    assert_no_companions_left(&fake).await;

    session.start().await.expect("the session starts again");
    let (second, _) = only_pod(&fake);
    assert_ne!(second, name, "a new pod");
    assert_eq!(session.exec("echo back").await.unwrap().stdout, "back\n");
    session.close().await.unwrap();
    assert_no_pods_left(&fake).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_session_image_pull_failure_is_typed_and_leaves_nothing() {
    let mut script = Script::idle();
    script.image_pull_fails = true;
    let (client, fake) = with_script(script).await;
    let session = client.session(config());
    let err = session.start().await.unwrap_err();
    match &err {
        Error::Cluster(ClusterError::ImagePull { image, .. }) => assert_eq!(image, IMAGE),
        other => panic!("expected an image pull error, got {other:?}"),
    }
    assert_no_pods_left(&fake).await;
    assert_no_companions_left(&fake).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_dropped_session_deletes_its_pod() {
    let (client, fake) = with_script(Script::idle()).await;
    let session = client.session(config());
    session.start().await.unwrap();
    only_pod(&fake);
    drop(session);
    assert_no_pods_left(&fake).await;
    assert_no_companions_left(&fake).await;

    // A start dropped part way leaves nothing either.
    for delay_ms in [0, 5, 15, 30, 60] {
        let session = client.session(config());
        let _ = tokio::time::timeout(Duration::from_millis(delay_ms), session.start()).await;
        drop(session);
        assert_no_pods_left(&fake).await;
        assert_no_companions_left(&fake).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_what_a_session_on_a_cluster_cannot_do_is_refused_before_anything_is_made() {
    let (client, fake) = with_script(Script::idle()).await;
    let before = fake.record(|r| r.requests.len());
    let refused = [
        config().mount("/tmp", "/data", true),
        config().persist(true),
        // Pausable and kept sessions and volumes are claims there
        // (tests/kube_simulated_storage.rs); a host path and an image
        // commit are not.
        config().network(Egress::allow(["*.pythonhosted.org"])),
        config()
            .network(Egress::allow(["api.example.test"]))
            .secret(Secret::value("KEY", "v4lue-bound").only_for(["api.example.test"])),
    ];
    for c in refused {
        let err = client.session(c).start().await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::Unsupported {
                    backend: "kubernetes",
                    ..
                }
            ),
            "{err:?}"
        );
    }
    let zero = client
        .session(config().start_timeout(Duration::ZERO))
        .start()
        .await
        .unwrap_err();
    assert!(matches!(zero, Error::InvalidSpec { .. }), "{zero:?}");
    let session = client.session(config());
    session.start().await.unwrap();
    let snapshot = session.snapshot().await.unwrap_err();
    assert!(
        matches!(
            snapshot,
            Error::Unsupported {
                backend: "kubernetes",
                ..
            }
        ),
        "{snapshot:?}"
    );
    session.close().await.unwrap();
    let made = fake.record(|r| {
        r.requests[before..]
            .iter()
            .filter(|r| r.starts_with("POST"))
            .count()
    });
    assert_eq!(made, 1, "one pod, no more: the refusals made nothing");
    assert_no_pods_left(&fake).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_session_pool_keeps_started_pods_and_hands_one_over() {
    use dockhand::pool::PoolConfig;
    let (client, fake) = with_script(Script::idle()).await;
    let pool = client
        .session_pool(config(), PoolConfig::new(2))
        .await
        .expect("a session pool on the cluster");
    assert!(
        pool.wait_ready(Duration::from_secs(10)).await,
        "{:?}",
        pool.stats()
    );
    let warm: Vec<String> = fake.record(|r| r.pods.keys().cloned().collect());
    assert_eq!(warm.len(), 2, "two pods made ahead of need");

    let session = pool.session().await.unwrap();
    let mine = session.describe().container_id.unwrap();
    assert!(
        warm.contains(&mine),
        "a handover of a pod made ahead: {mine}"
    );
    assert_eq!(session.exec("echo warm").await.unwrap().stdout, "warm\n");
    assert!(pool.wait_ready(Duration::from_secs(10)).await);
    assert_eq!(fake.record(|r| r.pods.len()), 3, "the pool refilled");
    assert_eq!(pool.stats().handed_over, 1);

    pool.shutdown().await;
    // Only the session handed over is left, then nothing.
    for _ in 0..300 {
        if fake.record(|r| r.pods.len()) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        fake.record(|r| r.pods.keys().cloned().collect::<Vec<_>>()),
        vec![mine]
    );
    session.close().await.unwrap();
    assert_no_pods_left(&fake).await;
    assert_no_companions_left(&fake).await;
}

fn code_host_config() -> CodeHostConfig {
    CodeHostConfig::new().image(ImageSpec::prebuilt(IMAGE))
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_code_host_is_a_pod_whose_bridge_calls_host_tools_over_the_attach_stream() {
    let (client, fake) = with_script(Script::idle()).await;
    let host = client.code_host(code_host_config());
    host.start()
        .await
        .expect("the code host starts on the cluster");
    let done = host
        .execute("add(a=a, b=b)", json!({"a": 2, "b": 40}), &add_tool())
        .await
        .expect("the execution");
    assert_eq!(
        done.value,
        json!(42),
        "the host's tool answered over the stream"
    );
    assert_eq!(done.stdout, "called add\n");
    assert_eq!(done.tool_calls.len(), 1);

    let (name, pod) = only_pod(&fake);
    assert_eq!(host.describe().container_id.as_deref(), Some(name.as_str()));
    let bridge = &pod["spec"]["containers"][0];
    assert_eq!(bridge["name"], json!("bridge"));
    assert_eq!(bridge["stdin"], json!(true));
    assert_eq!(bridge["image"], json!(IMAGE));
    assert_eq!(
        pod["metadata"]["labels"]["dev.dockhand.network"],
        json!("none")
    );
    assert_eq!(
        pod["metadata"]["ownerReferences"][0]["kind"],
        json!("Lease")
    );
    // No socket of this machine's is offered to a pod.
    assert!(!pod.to_string().contains("dockhand-bridge-"), "{pod}");
    let requests = fake.record(|r| r.requests.clone());
    let attach = position(&requests, 0, |r| {
        r.starts_with(&format!("GET /api/v1/namespaces/sim/pods/{name}/attach"))
    });
    assert!(
        requests[attach].contains("container=bridge"),
        "{}",
        requests[attach]
    );
    // The first hello's answer was lost (as containerd's attach can lose
    // it): the backend greeted again before anything else.
    let asked = fake.record(|r| r.agent_requests.clone());
    assert_eq!(asked[0].1["type"], json!("hello"), "{asked:?}");
    assert_eq!(asked[1].1["type"], json!("hello"), "{asked:?}");
    let asked = &asked[1..];
    assert_eq!(asked[1].1["type"], json!("execute"));
    assert_eq!(
        asked[2].1,
        json!({"type": "tool_result", "call": 1, "ok": true, "value": 42})
    );

    host.close().await.unwrap();
    assert_no_pods_left(&fake).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_code_host_refuses_an_image_to_build_and_mounts_before_anything_is_made() {
    let (client, fake) = with_script(Script::idle()).await;
    let before = fake.record(|r| r.requests.len());
    let to_build = client
        .code_host(CodeHostConfig::new())
        .start()
        .await
        .unwrap_err();
    match &to_build {
        Error::Unsupported {
            backend: "kubernetes",
            hint,
            ..
        } => {
            assert!(hint.contains("code_host_image"), "{hint}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let dir = tempfile::tempdir().unwrap();
    let mounted = client
        .code_host(code_host_config().mount("/data", dir.path(), MountMode::ReadOnly))
        .start()
        .await
        .unwrap_err();
    assert!(
        matches!(
            mounted,
            Error::Unsupported {
                backend: "kubernetes",
                ..
            }
        ),
        "{mounted:?}"
    );
    let posted = fake.record(|r| {
        r.requests[before..]
            .iter()
            .filter(|r| r.starts_with("POST"))
            .count()
    });
    assert_eq!(posted, 0, "nothing was made");
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_code_host_image_pull_failure_is_typed_and_leaves_nothing() {
    let mut script = Script::idle();
    script.image_pull_fails = true;
    let (client, fake) = with_script(script).await;
    let err = client
        .code_host(code_host_config())
        .start()
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Cluster(ClusterError::ImagePull { .. })),
        "{err:?}"
    );
    assert_no_pods_left(&fake).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_code_host_pool_hands_over_a_started_pod() {
    use dockhand::pool::PoolConfig;
    let (client, fake) = with_script(Script::idle()).await;
    let pool = client
        .code_host_pool(code_host_config(), PoolConfig::new(1))
        .await
        .unwrap();
    assert!(
        pool.wait_ready(Duration::from_secs(10)).await,
        "{:?}",
        pool.stats()
    );
    let warm = only_pod(&fake).0;
    let host = pool.host().await.unwrap();
    assert_eq!(host.describe().container_id.as_deref(), Some(warm.as_str()));
    let done = host
        .execute("add(a=a, b=b)", json!({"a": 1, "b": 1}), &add_tool())
        .await
        .unwrap();
    assert_eq!(done.value, json!(2));
    pool.shutdown().await;
    host.close().await.unwrap();
    assert_no_pods_left(&fake).await;
}
