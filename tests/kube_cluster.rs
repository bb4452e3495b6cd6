//! The Kubernetes backend on a REAL cluster: any kubeconfig (kind, k3d,
//! minikube, a cloud cluster).
//!
//! ```text
//! DOCKHAND_KUBE_TEST=1 cargo test --test kube_cluster
//! ```
//!
//! It uses the kubeconfig's current context (`DOCKHAND_KUBE_CONTEXT` for
//! another) and namespace (`DOCKHAND_KUBE_NAMESPACE` for another; the
//! account needs the Role of docs/scale-out.md there), and an image the
//! nodes can pull with `sh`, `grep` and `tar` (`DOCKHAND_KUBE_IMAGE`,
//! default `busybox:1.36`). Without `DOCKHAND_KUBE_TEST` every test here
//! prints how to run it and passes: no cluster can run on the machines CI
//! uses (tests/kube_simulated.rs covers the request flow there).

use std::time::Duration;

use dockhand::{CacheMode, Client, Error, ImageSpec, KubeConfig, Sandbox, Type, Value};

fn enabled(test: &str) -> bool {
    let on = std::env::var("DOCKHAND_KUBE_TEST").is_ok_and(|v| !v.is_empty() && v != "0");
    if !on {
        eprintln!(
            "skipped {test}: no cluster here. Run it against any kubeconfig with \
             `DOCKHAND_KUBE_TEST=1 cargo test --test kube_cluster`"
        );
    }
    on
}

fn image() -> String {
    std::env::var("DOCKHAND_KUBE_IMAGE").unwrap_or_else(|_| "busybox:1.36".into())
}

async fn client() -> Client {
    let mut config = KubeConfig::infer();
    if let Ok(context) = std::env::var("DOCKHAND_KUBE_CONTEXT") {
        config = config.context(context);
    }
    if let Ok(namespace) = std::env::var("DOCKHAND_KUBE_NAMESPACE") {
        config = config.namespace(namespace);
    }
    Client::builder()
        .kubernetes(config)
        .connect()
        .await
        .expect("connecting to the cluster of the kubeconfig")
}

async fn assert_nothing_left(client: &Client) {
    for _ in 0..60 {
        if client.live_containers().await.unwrap().is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!(
        "pods left behind: {:?}",
        client.live_containers().await.unwrap()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_one_shot_with_file_io() {
    if !enabled("cluster_one_shot_with_file_io") {
        return;
    }
    let client = client().await;
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "one\n\ntwo\nthree\n").unwrap();
    let count = Sandbox::command("count", "sh")
        .args([
            "-c",
            "grep -c . {{text}} > /var/outputs/lines; mkdir /var/outputs/copy; cp {{text}} /var/outputs/copy/",
        ])
        .input("text", Type::File)
        .output("lines", Type::Int)
        .output("copy", Type::Dir)
        .image(ImageSpec::prebuilt(image()))
        .cache(CacheMode::Disable)
        .timeout(Duration::from_secs(300))
        .build()
        .unwrap();
    let out = client
        .run(&count, [("text", Value::file(&notes))])
        .await
        .unwrap();
    assert_eq!(out.get::<i64>("lines").unwrap(), 3);
    let copy: std::path::PathBuf = out.get("copy").unwrap();
    assert_eq!(
        std::fs::read_to_string(copy.join("text")).unwrap(),
        "one\n\ntwo\nthree\n"
    );
    assert_nothing_left(&client).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_exit_code_and_timeout() {
    if !enabled("cluster_exit_code_and_timeout") {
        return;
    }
    let client = client().await;
    let failing = Sandbox::command("fail", "sh")
        .args(["-c", "echo oops; exit 3"])
        .image(ImageSpec::prebuilt(image()))
        .cache(CacheMode::Disable)
        .build()
        .unwrap();
    match client.run(&failing, dockhand::NO_INPUTS).await {
        Err(Error::NonZeroExit { exit_code, .. }) => assert_eq!(exit_code, 3),
        other => panic!("expected exit 3, got {other:?}"),
    }
    let hang = Sandbox::command("hang", "sleep")
        .args(["3600"])
        .image(ImageSpec::prebuilt(image()))
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let err = client.run(&hang, dockhand::NO_INPUTS).await.unwrap_err();
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert_nothing_left(&client).await;
}
