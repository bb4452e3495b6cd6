//! Volumes, pause, resume, forks and kept sessions on a REAL cluster (see
//! tests/kube_cluster.rs for the environment it reads): each a
//! PersistentVolumeClaim.
//!
//! ```text
//! DOCKHAND_KUBE_TEST=1 cargo test --test kube_cluster_storage -- --test-threads=1
//! ```
//!
//! The cluster needs claims to bind: a default StorageClass with a
//! provisioner, or (`DOCKHAND_KUBE_LOCAL_VOLUMES=<dir>`, for a cluster whose
//! nodes share this machine's filesystem, as the one of
//! `../shared/kube-cluster` does) static `hostPath` PersistentVolumes this
//! test makes under that directory, with no class. With two or more nodes,
//! a paused session resumes on another node than it ran on. Without
//! `DOCKHAND_KUBE_TEST` every test prints how to run it and passes
//! (tests/kube_simulated_storage.rs covers the request flow in CI).

use std::time::Duration;

use dockhand::k8s::{Placement, Storage};
use dockhand::session::{PauseMode, SessionApi, SessionConfig};
use dockhand::{Client, Error, ImageSpec, KubeConfig, Volume};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, Pod};
use kube::api::{ListParams, PostParams};
use kube::Api;

fn enabled(test: &str) -> bool {
    let on = std::env::var("DOCKHAND_KUBE_TEST").is_ok_and(|v| !v.is_empty() && v != "0");
    if !on {
        eprintln!(
            "skipped {test}: no cluster here. Run it against any kubeconfig with \
             `DOCKHAND_KUBE_TEST=1 cargo test --test kube_cluster_storage`"
        );
    }
    on
}

fn python_image() -> String {
    std::env::var("DOCKHAND_KUBE_PYTHON_IMAGE").unwrap_or_else(|_| "python:3.12-slim".into())
}

/// A client of the cluster, its pods on `node` if given.
async fn connect(node: Option<&str>) -> Client {
    let mut config = KubeConfig::infer().lease_duration(Duration::from_secs(5));
    if let Ok(namespace) = std::env::var("DOCKHAND_KUBE_NAMESPACE") {
        config = config.namespace(namespace);
    }
    if let Ok(agent) = std::env::var("DOCKHAND_KUBE_AGENT_IMAGE") {
        config = config.agent_image(agent);
    }
    if let Some(node) = node {
        config = config.placement(Placement::new().node_selector("kubernetes.io/hostname", node));
    }
    if std::env::var("DOCKHAND_KUBE_SHARED_WRITERS").is_ok_and(|v| v == "1") {
        config = config.storage(Storage::new().shared_writers(true));
    }
    Client::builder()
        .kubernetes(config)
        .connect()
        .await
        .expect("connecting to the cluster of the kubeconfig")
}

async fn kube() -> kube::Client {
    kube::Client::try_default().await.expect("the kubeconfig")
}

fn namespace() -> String {
    std::env::var("DOCKHAND_KUBE_NAMESPACE").unwrap_or_else(|_| "default".into())
}

/// The nodes' names, sorted.
async fn nodes() -> Vec<String> {
    let nodes: Api<Node> = Api::all(kube().await);
    let mut names: Vec<String> = nodes
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    names.sort();
    names
}

/// The node pod `name` runs on.
async fn node_of(name: &str) -> String {
    let pods: Api<Pod> = Api::namespaced(kube().await, &namespace());
    let pod = pods.get(name).await.unwrap();
    pod.spec.and_then(|s| s.node_name).unwrap_or_default()
}

/// Static `hostPath` PersistentVolumes for the claims to bind, where the
/// environment asks for them: `count` free ones at least (released ones
/// made again, empty).
async fn local_volumes(count: usize) {
    let Ok(dir) = std::env::var("DOCKHAND_KUBE_LOCAL_VOLUMES") else {
        return;
    };
    let volumes: Api<PersistentVolume> = Api::all(kube().await);
    let ours = ListParams::default().labels("dockhand-test-volume=true");
    let list = volumes.list(&ours).await.unwrap().items;
    let mut free = 0;
    let mut taken = std::collections::BTreeSet::new();
    for pv in list {
        let name = pv.metadata.name.clone().unwrap_or_default();
        let phase = pv.status.and_then(|s| s.phase).unwrap_or_default();
        if phase == "Released" || phase == "Failed" {
            let _ = volumes.delete(&name, &Default::default()).await;
            continue;
        }
        taken.insert(name);
        free += usize::from(phase == "Available");
    }
    // Released volumes are deleted as their claims go: wait for them.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut i = 0;
    while free < count {
        let name = format!("dockhand-test-pv-{i}");
        i += 1;
        if taken.contains(&name) || volumes.get_opt(&name).await.unwrap().is_some() {
            continue;
        }
        let path = format!("{dir}/{name}");
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        // Any session user writes it (hostPath has no fsGroup ownership).
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o1777))
            .unwrap();
        let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {"dockhand-test-volume": "true"}},
            "spec": {
                "capacity": {"storage": "2Gi"},
                "accessModes": ["ReadWriteOnce", "ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": path, "type": "Directory"},
            }
        }))
        .unwrap();
        volumes.create(&PostParams::default(), &pv).await.unwrap();
        free += 1;
    }
}

/// The names of dockhand's claims in the namespace not being deleted.
async fn managed_claims() -> Vec<String> {
    let claims: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(kube().await, &namespace());
    claims
        .list(&ListParams::default().labels("dev.dockhand.managed=true"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .filter_map(|c| c.metadata.name)
        .collect()
}

/// No claim of dockhand's left in the namespace, nor a pod of the client's.
async fn assert_no_claims(client: &Client) {
    for _ in 0..60 {
        let left = managed_claims().await;
        if left.is_empty() && client.live_containers().await.unwrap().is_empty() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!(
        "claims or pods left behind: pods {:?}",
        client.live_containers().await.unwrap()
    );
}

fn session(config: SessionConfig) -> SessionConfig {
    config
        .image(ImageSpec::prebuilt(python_image()))
        .cpus(0.2)
        .start_timeout(Duration::from_secs(300))
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_volume_shared_by_two_pods() {
    if !enabled("cluster_volume_shared_by_two_pods") {
        return;
    }
    local_volumes(1).await;
    let client = connect(None).await;
    let started = std::time::Instant::now();
    let volume = Volume::create(&client, "shared-data").await.unwrap();
    println!("volume claim made in {:?}", started.elapsed());
    assert!(Volume::list(&client)
        .await
        .unwrap()
        .iter()
        .any(|v| v.name == "shared-data"));
    let writer = client.session(session(SessionConfig::new().volume("shared-data", "/data")));
    let started = std::time::Instant::now();
    writer.start().await.unwrap();
    println!(
        "a session mounting the volume started in {:?}",
        started.elapsed()
    );
    writer.write_file("/data/a.csv", b"x\n1\n").await.unwrap();
    let reader = client.session(session(
        SessionConfig::new().volume_read_only("shared-data", "/data"),
    ));
    reader.start().await.unwrap();
    assert_eq!(reader.read_file("/data/a.csv").await.unwrap(), b"x\n1\n");
    let denied = reader.exec("echo no > /data/b.csv").await.unwrap();
    assert_ne!(denied.exit_code, 0, "a read-only mount was written");
    // A second writer of a one-writer claim: refused, naming the first.
    let second = client.session(session(SessionConfig::new().volume("shared-data", "/data")));
    match second.start().await {
        Err(Error::InvalidSpec { message, .. }) => {
            assert!(message.contains("one writer"), "{message}")
        }
        other => panic!("a second writer started: {other:?}"),
    }
    // Not removed while mounted.
    assert!(volume.remove(&client).await.is_err());
    writer.close().await.unwrap();
    reader.close().await.unwrap();
    // What the writer left is there for the next session.
    let later = client.session(session(
        SessionConfig::new().volume_read_only("shared-data", "/data"),
    ));
    later.start().await.unwrap();
    assert_eq!(later.read_file("/data/a.csv").await.unwrap(), b"x\n1\n");
    later.close().await.unwrap();
    volume.remove(&client).await.unwrap();
    assert!(Volume::get(&client, "shared-data").await.unwrap().is_none());
    assert_no_claims(&client).await;
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_pause_resume_and_fork_of_four() {
    if !enabled("cluster_pause_resume_and_fork_of_four") {
        return;
    }
    local_volumes(9).await;
    let client = connect(None).await;
    let s = client.session(session(
        SessionConfig::new().pausable(true).name("pausable"),
    ));
    s.start().await.unwrap();
    s.write_file("notes.txt", b"kept").await.unwrap();
    s.exec("mkdir -p deep/er && echo x > deep/er/f && ln -s notes.txt link")
        .await
        .unwrap();
    // Memory stays on Docker: refused with the reason, the session runs on.
    match s.pause(PauseMode::Memory).await {
        Err(Error::PauseUnsupported { reason }) => {
            assert!(reason.contains("docs/scale-out.md"), "{reason}")
        }
        other => panic!("a memory pause on a cluster: {other:?}"),
    }
    assert_eq!(s.exec("cat notes.txt").await.unwrap().stdout, "kept");
    let pod = s.describe().container_id.unwrap();
    let started = std::time::Instant::now();
    let paused = s.pause(PauseMode::Filesystem).await.unwrap();
    println!("paused in {:?} (claim {})", started.elapsed(), paused.id);
    // The pod is gone, the claim stays.
    assert!(client
        .live_containers()
        .await
        .unwrap()
        .iter()
        .all(|p| p != &pod));
    let started = std::time::Instant::now();
    s.resume().await.unwrap();
    println!("resumed in {:?}", started.elapsed());
    assert_eq!(s.read_file("notes.txt").await.unwrap(), b"kept");
    assert_eq!(
        s.exec("cat deep/er/f link").await.unwrap().stdout,
        "x\nkept"
    );
    // Four forks, each on a copy: writes diverge.
    let started = std::time::Instant::now();
    let forks = s.fork(4, PauseMode::Filesystem).await.unwrap();
    println!("fork of 4 in {:?}", started.elapsed());
    for (i, f) in forks.iter().enumerate() {
        f.write_file("notes.txt", format!("fork {i}").as_bytes())
            .await
            .unwrap();
        assert_eq!(
            f.exec("cat link").await.unwrap().stdout,
            format!("fork {i}")
        );
        assert_eq!(f.exec("cat deep/er/f").await.unwrap().stdout, "x\n");
    }
    for (i, f) in forks.iter().enumerate() {
        assert_eq!(
            f.read_file("notes.txt").await.unwrap(),
            format!("fork {i}").as_bytes()
        );
    }
    assert_eq!(s.read_file("notes.txt").await.unwrap(), b"kept");
    for f in forks {
        f.close().await.unwrap();
    }
    // A snapshot: a kept copy of the claim a later session starts from.
    let started = std::time::Instant::now();
    let snapshot = s.snapshot().await.unwrap();
    println!("snapshot in {:?} ({:?})", started.elapsed(), snapshot.files);
    s.write_file("notes.txt", b"after").await.unwrap();
    let from = client.session(session(SessionConfig::new()).from_snapshot(&snapshot));
    from.start().await.unwrap();
    assert_eq!(from.read_file("notes.txt").await.unwrap(), b"kept");
    from.close().await.unwrap();
    client.remove_snapshot(&snapshot).await.unwrap();
    s.close().await.unwrap();
    assert_no_claims(&client).await;
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_kept_session_moves_node_and_process() {
    if !enabled("cluster_kept_session_moves_node_and_process") {
        return;
    }
    local_volumes(1).await;
    let nodes = nodes().await;
    let (first, second) = match nodes.as_slice() {
        [a, b, ..] => (Some(a.as_str()), Some(b.as_str())),
        _ => (None, None),
    };
    let one = connect(first).await;
    let s = one.session(session(SessionConfig::new().keep(true).name("kept")));
    s.start().await.unwrap();
    let ran_on = node_of(&s.describe().container_id.unwrap()).await;
    s.write_file("work.txt", b"before the move").await.unwrap();
    let paused = s.pause(PauseMode::Filesystem).await.unwrap();
    let id = paused.id.clone();
    let kept = one.kept_sessions().await.unwrap();
    assert!(
        kept.iter()
            .any(|k| k.id == id && k.state == "stopped (files)"),
        "{kept:?}"
    );
    drop(s);
    // Another client (another owner lease): refused while the first lives.
    let two = connect(second).await;
    match two.kept_session(&id, session(SessionConfig::new())).await {
        Err(Error::SessionUnavailable { reason }) => {
            assert!(reason.contains("held by another"), "{reason}")
        }
        other => panic!("a held kept session was taken: {other:?}"),
    }
    // The first ends: the second takes it over, on its node.
    one.close().await.unwrap();
    let started = std::time::Instant::now();
    let s = two
        .resume_session(&id, session(SessionConfig::new()))
        .await
        .unwrap();
    println!(
        "kept session resumed by another client in {:?}",
        started.elapsed()
    );
    let now_on = node_of(&s.describe().container_id.unwrap()).await;
    println!("ran on {ran_on}, resumed on {now_on}");
    if second.is_some() {
        assert_ne!(ran_on, now_on, "resumed on the node it ran on");
    }
    assert_eq!(s.read_file("work.txt").await.unwrap(), b"before the move");
    s.close().await.unwrap();
    assert!(two
        .kept_sessions()
        .await
        .unwrap()
        .iter()
        .all(|k| k.id != id));
    assert_no_claims(&two).await;
    two.close().await.unwrap();
}

const CHILD_ENV: &str = "DOCKHAND_KUBE_STORAGE_CHILD";

#[tokio::test(flavor = "multi_thread")]
#[ignore = "run as a child process by cluster_owner_death_takes_its_claims_and_leaves_kept_ones"]
async fn cluster_storage_owner_child() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let client = connect(None).await;
    let pausable = client.session(session(SessionConfig::new().pausable(true).name("dies")));
    pausable.start().await.unwrap();
    let kept = client.session(session(SessionConfig::new().keep(true).name("outlives")));
    kept.start().await.unwrap();
    kept.write_file("left.txt", b"by a dead process")
        .await
        .unwrap();
    let id = kept.pause(PauseMode::Filesystem).await.unwrap().id;
    println!("kept {id}");
    println!("pod {}", pausable.describe().container_id.unwrap());
    tokio::time::sleep(Duration::from_secs(3600)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_owner_death_takes_its_claims_and_leaves_kept_ones() {
    use std::io::BufRead;
    if !enabled("cluster_owner_death_takes_its_claims_and_leaves_kept_ones") {
        return;
    }
    local_volumes(2).await;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "cluster_storage_owner_child",
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_ENV, "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok);
    let kept = lines
        .find_map(|l| l.strip_prefix("kept ").map(String::from))
        .expect("the child kept a session");
    let pod = lines
        .find_map(|l| l.strip_prefix("pod ").map(String::from))
        .expect("the child started a pausable session");
    child.kill().unwrap();
    let _ = child.wait();
    // Another process sweeps the lapsed lease; the garbage collector takes
    // the pausable session's pod and claim, and leaves the kept claim.
    let client = connect(None).await;
    let pods: Api<Pod> = Api::namespaced(kube().await, &namespace());
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        client.reap().await.unwrap();
        let left = managed_claims().await;
        let pod_gone = pods.get_opt(&pod).await.unwrap().is_none();
        if pod_gone && left == vec![kept.clone()] {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "after the owner's SIGKILL: pod {pod} gone {pod_gone}, claims {left:?} (only {kept} should stay)"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    // The kept one is taken over, with its files, and then removed.
    let s = client
        .resume_session(&kept, session(SessionConfig::new()))
        .await
        .unwrap();
    assert_eq!(s.read_file("left.txt").await.unwrap(), b"by a dead process");
    s.close().await.unwrap();
    assert_no_claims(&client).await;
    client.close().await.unwrap();
}
