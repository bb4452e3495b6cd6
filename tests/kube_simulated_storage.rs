//! Volumes, pause, resume, forks and kept sessions on the Kubernetes
//! backend against the SIMULATED API server, whose Docker-backed kubelet
//! runs the pods (the real session agent, the real copy of a claim) with
//! each PersistentVolumeClaim a directory of the simulated node's
//! (tests/kube/fake_api/claims.rs). tests/kube_cluster_storage.rs runs the
//! same steps on a real cluster.

mod common;
#[path = "kube/mod.rs"]
mod sim;

use std::time::Duration;

use dockhand::session::{PauseMode, SessionApi, SessionConfig};
use dockhand::{Client, Error, ImageSpec, Volume};
use serde_json::Value;
use sim::fake_api::{Script, Shared};
use sim::{assert_no_pods_left, with_script};

/// The simulated cluster, its nodes running the images the Docker daemon
/// made (the agent's and the base image).
async fn cluster() -> (Client, Shared, ImageSpec) {
    let docker = common::client().await;
    docker
        .session_agent_image()
        .await
        .expect("the agent's image");
    let base = docker
        .resolve_image(&ImageSpec::default())
        .await
        .expect("the base image");
    let (client, fake) = with_script(Script::on_docker()).await;
    (client, fake, ImageSpec::prebuilt(&base.reference))
}

fn claims(fake: &Shared) -> Vec<Value> {
    fake.record(|r| r.claims.values().cloned().collect())
}

/// The claims pod `name` mounts: (claim, read-only).
fn mounted(fake: &Shared, pod: &str) -> Vec<(String, bool)> {
    fake.record(|r| {
        r.pods[pod]["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| {
                let c = &v["persistentVolumeClaim"];
                Some((
                    c["claimName"].as_str()?.to_string(),
                    c["readOnly"].as_bool().unwrap_or(false),
                ))
            })
            .collect()
    })
}

async fn assert_no_claims_left(fake: &Shared) {
    for _ in 0..300 {
        if fake.record(|r| r.claims.is_empty()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let left: Vec<String> = fake.record(|r| r.claims.keys().cloned().collect());
    panic!("claims left behind: {left:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_volume_is_a_claim_its_sessions_mount() {
    let (client, fake, image) = cluster().await;
    // A name a claim cannot have is refused before anything is made.
    match Volume::create(&client, "Data_1").await {
        Err(Error::InvalidSpec { message, .. }) => {
            assert!(message.contains("PersistentVolumeClaim"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    let mut labels = std::collections::HashMap::new();
    labels.insert("team/owner".to_string(), "data science: ü".to_string());
    let volume = Volume::create_labelled(&client, "datasets", labels.clone())
        .await
        .unwrap();
    assert_eq!(volume.labels, labels);
    let made = claims(&fake);
    assert_eq!(made.len(), 1);
    let claim = &made[0];
    assert_eq!(claim["metadata"]["name"], "dockhand-volume-datasets");
    assert_eq!(claim["spec"]["accessModes"][0], "ReadWriteOnce");
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "1Gi");
    assert_eq!(
        claim["metadata"]["labels"]["dev.dockhand.volume"],
        "datasets"
    );
    // A volume outlives the process: no owner.
    assert!(claim["metadata"]["ownerReferences"].is_null(), "{claim}");
    assert!(Volume::create(&client, "datasets").await.is_err());
    let listed = Volume::list(&client).await.unwrap();
    assert_eq!(listed, vec![volume.clone()]);

    let writer = client.session(
        SessionConfig::new()
            .image(image.clone())
            .volume("datasets", "/data"),
    );
    writer.start().await.unwrap();
    writer.write_file("/data/a.csv", b"x\n1\n").await.unwrap();
    let pod = writer.describe().container_id.unwrap();
    assert_eq!(
        mounted(&fake, &pod),
        vec![("dockhand-volume-datasets".to_string(), false)]
    );
    let reader = client.session(
        SessionConfig::new()
            .image(image.clone())
            .volume_read_only("datasets", "/data"),
    );
    reader.start().await.unwrap();
    assert_eq!(reader.read_file("/data/a.csv").await.unwrap(), b"x\n1\n");
    let denied = reader.exec("echo no > /data/b.csv").await.unwrap();
    assert_ne!(denied.exit_code, 0, "{denied:?}");
    // One writer at a time on a ReadWriteOnce claim, said before a pod.
    let pods_before = fake.record(|r| r.created.len());
    let second = client.session(
        SessionConfig::new()
            .image(image.clone())
            .volume("datasets", "/data"),
    );
    match second.start().await {
        Err(Error::InvalidSpec { message, .. }) => {
            assert!(
                message.contains(&pod) && message.contains("one writer"),
                "{message}"
            )
        }
        other => panic!("a second writer: {other:?}"),
    }
    assert_eq!(fake.record(|r| r.created.len()), pods_before);
    // A missing volume is refused, not waited for.
    let missing = client.session(
        SessionConfig::new()
            .image(image.clone())
            .volume("nowhere", "/x"),
    );
    assert!(matches!(
        missing.start().await,
        Err(Error::InvalidSpec { .. })
    ));
    // Not removed while mounted.
    assert!(volume.remove(&client).await.is_err());
    writer.close().await.unwrap();
    reader.close().await.unwrap();
    assert_no_pods_left(&fake).await;
    volume.remove(&client).await.unwrap();
    assert!(Volume::get(&client, "datasets").await.unwrap().is_none());
    assert_no_claims_left(&fake).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_pause_deletes_the_pod_and_resume_mounts_the_claim_again() {
    let (client, fake, image) = cluster().await;
    let s = client.session(SessionConfig::new().image(image).pausable(true).name("p"));
    s.start().await.unwrap();
    let first = s.describe().container_id.unwrap();
    let claim = {
        let made = claims(&fake);
        assert_eq!(made.len(), 1, "{made:?}");
        made[0]["metadata"]["name"].as_str().unwrap().to_string()
    };
    // Owned by the process's lease: gone with it if the process dies.
    let owners = fake.record(|r| r.claims[&claim]["metadata"]["ownerReferences"].clone());
    assert_eq!(owners[0]["kind"], "Lease", "{owners}");
    assert_eq!(mounted(&fake, &first), vec![(claim.clone(), false)]);
    s.write_file("notes.txt", b"kept").await.unwrap();
    s.exec("mkdir -p deep && echo x > deep/f && ln -s notes.txt link")
        .await
        .unwrap();
    match s.pause(PauseMode::Memory).await {
        Err(Error::PauseUnsupported { reason }) => {
            assert!(reason.contains("docs/scale-out.md"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.exec("cat notes.txt").await.unwrap().stdout, "kept");
    let paused = s.pause(PauseMode::Filesystem).await.unwrap();
    assert_eq!(paused.id, claim);
    assert_no_pods_left(&fake).await;
    assert!(fake.record(|r| r.claims.contains_key(&claim)));
    s.resume().await.unwrap();
    let second = s.describe().container_id.unwrap();
    assert_ne!(first, second);
    assert_eq!(mounted(&fake, &second), vec![(claim.clone(), false)]);
    assert_eq!(
        s.exec("cat notes.txt deep/f link").await.unwrap().stdout,
        "keptx\nkept"
    );

    // Forks: each on a copy made by a pod of the backend's.
    let forks = s.fork(2, PauseMode::Filesystem).await.unwrap();
    let copies: Vec<Value> = fake.record(|r| {
        r.created
            .iter()
            .filter(|p| p["metadata"]["labels"]["dev.dockhand.kind"] == "copy")
            .cloned()
            .collect()
    });
    assert_eq!(copies.len(), 2);
    for copy in &copies {
        assert_eq!(
            copy["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
            claim.as_str()
        );
        assert_eq!(
            copy["spec"]["volumes"][0]["persistentVolumeClaim"]["readOnly"],
            true
        );
    }
    for (i, f) in forks.iter().enumerate() {
        f.write_file("notes.txt", format!("fork {i}").as_bytes())
            .await
            .unwrap();
    }
    for (i, f) in forks.iter().enumerate() {
        let seen = f.exec("cat link deep/f").await.unwrap().stdout;
        assert_eq!(seen, format!("fork {i}x\n"));
    }
    assert_eq!(s.read_file("notes.txt").await.unwrap(), b"kept");
    assert_eq!(claims(&fake).len(), 3);
    for f in forks {
        f.close().await.unwrap();
    }
    // A fork in memory mode: refused, as a pause.
    assert!(matches!(
        s.fork(1, PauseMode::Memory).await,
        Err(Error::PauseUnsupported { .. })
    ));
    s.close().await.unwrap();
    assert_no_pods_left(&fake).await;
    assert_no_claims_left(&fake).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_kept_session_is_held_by_one_client_and_taken_over_by_another() {
    let (one, fake, image) = cluster().await;
    let url = fake_url(&one);
    let s = one.session(SessionConfig::new().image(image).keep(true).name("kept"));
    s.start().await.unwrap();
    s.write_file("work.txt", b"before").await.unwrap();
    let id = s.pause(PauseMode::Filesystem).await.unwrap().id;
    let claim = fake.record(|r| r.claims[&id].clone());
    assert!(claim["metadata"]["ownerReferences"].is_null(), "{claim}");
    assert_eq!(claim["metadata"]["labels"]["dev.dockhand.kept"], "true");
    let listed = one.kept_sessions().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].id.as_str(), listed[0].state.as_str()),
        (id.as_str(), "stopped (files)")
    );
    assert_eq!(listed[0].name.as_deref(), Some("kept"));
    drop(s);
    tokio::time::sleep(Duration::from_millis(200)).await;
    // The handle went: the claim stays.
    assert!(fake.record(|r| r.claims.contains_key(&id)));

    let two = sim::connect(&url).await.unwrap();
    match two.kept_session(&id, SessionConfig::new()).await {
        Err(Error::SessionUnavailable { reason }) => {
            assert!(reason.contains("held by another"), "{reason}")
        }
        other => panic!("taken while held: {other:?}"),
    }
    one.close().await.unwrap();
    let s = two.resume_session(&id, SessionConfig::new()).await.unwrap();
    assert_eq!(s.read_file("work.txt").await.unwrap(), b"before");
    s.close().await.unwrap();
    assert_no_pods_left(&fake).await;
    assert_no_claims_left(&fake).await;
    assert!(two.kept_sessions().await.unwrap().is_empty());
    // An unknown one is said to be unknown.
    assert!(two
        .kept_session("dockhand-files-none", SessionConfig::new())
        .await
        .is_err());
}

/// The simulated API server's URL a client was connected to.
fn fake_url(client: &Client) -> String {
    client.endpoint().trim_end_matches('/').to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_snapshot_is_a_kept_copy_of_the_claim_and_sessions_start_from_it() {
    let (client, fake, image) = cluster().await;
    // Not pausable: no claim to copy, refused before anything is made.
    let plain = client.session(SessionConfig::new().image(image.clone()));
    plain.start().await.unwrap();
    match plain.snapshot().await {
        Err(Error::Unsupported { hint, .. }) => assert!(hint.contains("pausable"), "{hint}"),
        other => panic!("{other:?}"),
    }
    plain.close().await.unwrap();

    let s = client.session(
        SessionConfig::new()
            .image(image)
            .pausable(true)
            .name("snap"),
    );
    s.start().await.unwrap();
    s.write_file("state.txt", b"at the snapshot").await.unwrap();
    let snapshot = s.snapshot().await.unwrap();
    let files = snapshot.files.clone().expect("a claim");
    let claim = fake.record(|r| r.claims[&files].clone());
    assert_eq!(
        claim["metadata"]["labels"]["dev.dockhand.kind"],
        "session-snapshot"
    );
    assert!(claim["metadata"]["ownerReferences"].is_null(), "{claim}");
    assert!(
        claim["metadata"]["annotations"]["dev.dockhand.held-by"].is_null(),
        "{claim}"
    );
    assert_eq!(client.snapshots().await.unwrap(), vec![snapshot.clone()]);
    s.write_file("state.txt", b"after it").await.unwrap();
    // Two sessions from it: each on a copy, each seeing the snapshot's files.
    let one = client.session(SessionConfig::new().from_snapshot(&snapshot));
    let two = client.session(SessionConfig::new().from_snapshot(&snapshot));
    one.start().await.unwrap();
    two.start().await.unwrap();
    assert_eq!(
        one.read_file("state.txt").await.unwrap(),
        b"at the snapshot"
    );
    one.write_file("state.txt", b"one's").await.unwrap();
    assert_eq!(
        two.read_file("state.txt").await.unwrap(),
        b"at the snapshot"
    );
    assert_eq!(s.read_file("state.txt").await.unwrap(), b"after it");
    for session in [one, two, s] {
        session.close().await.unwrap();
    }
    // The snapshot outlives its session; removed, its claim goes.
    assert!(fake.record(|r| r.claims.contains_key(&files)));
    client.remove_snapshot(&snapshot).await.unwrap();
    assert!(client.snapshots().await.unwrap().is_empty());
    assert_no_pods_left(&fake).await;
    assert_no_claims_left(&fake).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_dropped_starts_and_forks_leave_no_claim_or_pod() {
    let (client, fake, image) = cluster().await;
    let config = SessionConfig::new().image(image).pausable(true);
    // Dropped at any point of its start: the claim and the pod go.
    for delay_ms in [0, 10, 50, 200, 800] {
        let s = client.session(config.clone());
        let _ = tokio::time::timeout(Duration::from_millis(delay_ms), s.start()).await;
        drop(s);
    }
    assert_no_pods_left(&fake).await;
    assert_no_claims_left(&fake).await;
    // A fork dropped while its copies run: copies, claims and pods go; the
    // parent runs on.
    let parent = client.session(config.clone());
    parent.start().await.unwrap();
    parent.write_file("a.txt", b"parent").await.unwrap();
    for delay_ms in [30, 300, 1500] {
        let _ = tokio::time::timeout(
            Duration::from_millis(delay_ms),
            parent.fork(2, PauseMode::Filesystem),
        )
        .await;
    }
    assert_eq!(parent.read_file("a.txt").await.unwrap(), b"parent");
    parent.close().await.unwrap();
    assert_no_pods_left(&fake).await;
    assert_no_claims_left(&fake).await;
}
