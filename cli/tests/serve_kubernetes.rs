//! `dockhand serve --backend kubernetes` driven by the E2B SDKs, against
//! the SIMULATED Kubernetes API server of tests/kube, whose kubelet runs
//! the pods as real Docker containers: the real session agent and a real
//! ipykernel behind the kernel's relay, reached through attach WebSockets
//! as on a cluster. The server builds its templates on the local Docker
//! daemon and pushes them to a registry of the test's own
//! (`--kube-registry`); the simulated nodes pull them from there by digest.
//! The same script runs against a real cluster by hand (docs/scale-out.md).

mod common;
#[path = "../../tests/common/registry.rs"]
mod registry;
#[path = "common/serve_server.rs"]
mod serve_server;
#[path = "../../tests/kube/mod.rs"]
mod sim;

use std::time::Duration;

use serve_server::{json_output, Server};
use sim::fake_api::Script;

/// A kubeconfig naming the simulated server, namespace `sim`.
fn kubeconfig(dir: &std::path::Path, url: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: sim\n\
         clusters:\n- name: sim\n  cluster:\n    server: {url}\n\
         users:\n- name: sim\n  user: {{}}\n\
         contexts:\n- name: sim\n  context:\n    cluster: sim\n    user: sim\n    namespace: sim\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// What a run of `cluster.py` against `serve --backend kubernetes` leaves
/// to look at: the server (running), the script's report, the simulated
/// API server, and the registry its images went to (kept while they are).
struct OnCluster {
    server: Server,
    report: serde_json::Value,
    fake: sim::fake_api::Shared,
    repository: String,
    _registry: registry::TestRegistry,
    _dir: tempfile::TempDir,
}

/// Starts `serve --backend kubernetes` with a pool of `pool` and `extra`
/// arguments against the simulated API server (its kubelet on Docker),
/// images pushed to a registry of the test's own, and runs `cluster.py`
/// with `script_args`.
async fn cluster_py(pool: usize, extra: &[&str], script_args: &[&str]) -> OnCluster {
    let docker = dockhand::Client::builder()
        .docker()
        .connect()
        .await
        .expect("the Docker daemon");
    let registry = registry::TestRegistry::open(&docker).await;
    let (url, fake) = sim::fake_api::start("sim", Script::on_docker()).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = kubeconfig(dir.path(), &url).to_str().unwrap().to_string();
    let repository = format!("{}/serve", registry.host);
    let mut args: Vec<String> = ["--backend", "kubernetes", "--kube-registry", &repository]
        .iter()
        .map(|a| a.to_string())
        .collect();
    args.extend(extra.iter().map(|a| a.to_string()));
    let script_args: Vec<String> = script_args.iter().map(|a| a.to_string()).collect();
    let (server, report) = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let script_args: Vec<&str> = script_args.iter().map(String::as_str).collect();
        let server = Server::start_with_env(pool, &args, &[("KUBECONFIG", &kubeconfig)]);
        let report = json_output(server.python("cluster.py", &script_args));
        (server, report)
    })
    .await
    .unwrap();
    OnCluster {
        server,
        report,
        fake,
        repository,
        _registry: registry,
        _dir: dir,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_on_kubernetes_runs_the_e2b_sdks_in_pods_and_refuses_what_a_cluster_cannot_do() {
    // The registry and directory live to the test's end, as bindings.
    let OnCluster {
        server,
        report,
        fake,
        repository,
        _registry,
        _dir,
    } = cluster_py(1, &[], &["interpreter"]).await;

    // Commands, files and streaming, in a pod.
    assert_eq!(report["listed"], true, "{report}");
    assert_eq!(report["stdout_lines"], serde_json::json!(["42"]));
    assert_eq!(report["stderr"], "err\n");
    assert_eq!(report["hostname_is_pod"], true, "{report}");
    assert_eq!(report["exit_3"], 3);
    assert_eq!(report["read"], "hello pod");
    assert_eq!(report["ls"], serde_json::json!(["a.txt"]));
    assert_eq!(report["streamed"], serde_json::json!(["1", "2", "3"]));
    assert_eq!(report["port"], "served from the pod");
    // What a cluster cannot do: 501 naming the backend, and the sandbox runs on.
    assert_eq!(report["pause"], serde_json::json!([501, true]), "{report}");
    assert_eq!(report["running_after_pause"], true);
    assert_eq!(
        report["snapshot"],
        serde_json::json!([501, true]),
        "{report}"
    );
    assert_eq!(report["after_refusals"], "hello pod");
    // A volume: a claim, written in one pod, read in another and through
    // the content API, kept while mounted.
    assert_eq!(report["volume_read_back"], "from a pod\n", "{report}");
    assert_eq!(report["volume_content"], "from a pod\n", "{report}");
    assert_eq!(report["volume_content_while_written"], "409", "{report}");
    assert_ne!(report["volume_destroy_mounted"], "destroyed", "{report}");
    assert_eq!(report["volume_destroyed"], true, "{report}");
    assert!(fake.record(|r| r.claims.is_empty()), "claims left");
    assert_eq!(report["killed"], true);
    // The code interpreter: a real kernel in a pod.
    assert_eq!(report["run_code"], "42");
    assert_eq!(report["printed"], serde_json::json!(["printed\n"]));
    assert_eq!(report["error"], "ZeroDivisionError");

    // Every pod came from an image pushed here, by digest, and carried the
    // server's owner label.
    let created = fake.record(|r| r.created.clone());
    assert!(created.len() >= 3, "the pools' pods and the sandboxes'");
    let pushed = format!("{repository}/");
    for pod in &created {
        assert!(
            pod["metadata"]["labels"]["dev.dockhand.owner"].is_string(),
            "{pod}"
        );
        for container in pod["spec"]["containers"].as_array().unwrap() {
            let image = container["image"].as_str().unwrap();
            assert!(
                image.starts_with(&pushed) && image.contains("@sha256:"),
                "{image}"
            );
        }
    }

    // A shutdown deletes every pod, the pools' too, and the server's lease.
    drop(server);
    sim::assert_no_pods_left(&fake).await;
    assert!(
        fake.record(|r| r.leases.is_empty()),
        "the owner lease goes at exit, not when it lapses"
    );
    for _ in 0..100 {
        if common::containers_with_label("dev.dockhand.kube-sim=true") == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        common::containers_with_label("dev.dockhand.kube-sim=true"),
        0,
        "the simulated kubelet's containers were left behind"
    );
}

#[test]
fn serve_on_kubernetes_refuses_keeping_sandboxes_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    // Refused before connecting: no cluster needed.
    let out = common::dockhand()
        .args(["serve", "--backend", "kubernetes", "--on-shutdown", "keep"])
        .arg("--state-dir")
        .arg(dir.path())
        .env("KUBECONFIG", kubeconfig(dir.path(), "http://127.0.0.1:9"))
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--on-shutdown keep is not available on the kubernetes backend"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn serve_on_kubernetes_with_claims_pauses_connects_and_snapshots_through_the_e2b_sdk() {
    let OnCluster {
        server,
        report,
        fake,
        _registry,
        _dir,
        ..
    } = cluster_py(0, &["--kube-pausable"], &["pause"]).await;
    let pause = &report["pause"];
    assert_eq!(pause["paused"], true, "{report}");
    assert_eq!(pause["state_after_pause"], "paused", "{report}");
    assert_eq!(pause["paused_again"], false, "{report}");
    assert_eq!(pause["state_after_connect"], "running", "{report}");
    assert_eq!(pause["file_after"], "kept in a claim", "{report}");
    assert_eq!(pause["command_after"], "kept in a claim", "{report}");
    assert_eq!(pause["paused_at_timeout"], true, "{report}");
    assert_eq!(pause["auto_resumed_read"], "auto", "{report}");
    assert_eq!(pause["running_after_call"], "running", "{report}");
    assert_eq!(pause["snapshot_copy"], "from the snapshot", "{report}");
    assert_eq!(pause["snapshot_source"], "changed after", "{report}");
    assert_eq!(
        pause["snapshot_after_source_killed"], "from the snapshot",
        "{report}"
    );
    assert_eq!(pause["snapshot_deleted"], true, "{report}");
    // Each sandbox had a claim of its own, owned by the server's lease:
    // paused, its pod went and its claim stayed; killed, both went.
    let made = fake.record(|r| r.claims_created.len());
    assert!(made >= 2, "{made} claims");
    drop(server);
    sim::assert_no_pods_left(&fake).await;
    for _ in 0..100 {
        if fake.record(|r| r.claims.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(fake.record(|r| r.claims.is_empty()), "claims left behind");
}

#[tokio::test(flavor = "multi_thread")]
async fn doctor_on_kubernetes_says_what_it_cannot_check_of_the_cluster() {
    let (url, _fake) = sim::fake_api::start("sim", Script::idle()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), &url);
    let out = tokio::task::spawn_blocking(move || {
        common::dockhand()
            .args(["--backend", "kubernetes", "--json", "doctor"])
            .env("KUBECONFIG", &config)
            .env("DOCKHAND_KUBE_STORAGE_CLASS", "fast-ssd")
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    let check = |name: &str| {
        report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} check: {report}"))
    };
    assert_eq!(check("cluster")["status"], "ok", "{report}");
    assert!(check("storage")["detail"]
        .as_str()
        .unwrap()
        .contains("`fast-ssd`"));
    let policy = check("network policy");
    assert_eq!(policy["status"], "warn", "{report}");
    assert!(policy["detail"].as_str().unwrap().contains("NetworkPolicy"));
    // No Docker daemon is asked about on a cluster.
    assert!(report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["name"] != "daemon"));
    assert_eq!(report["ok"], true, "{report}");
}
