//! One-shot pools on the Kubernetes backend, against the SIMULATED API
//! server (tests/kube/fake_api): the pods a pool makes ahead, what a run
//! sends the one it takes, and what is not pooled. Simulations: no control
//! plane can run here; kube_on_docker runs the pool pod's own commands for
//! real, and kube_cluster the same scenario on a real cluster.

#[path = "kube/mod.rs"]
mod sim;

use std::sync::Arc;
use std::time::Duration;

use dockhand::{CacheMode, ImageSpec, Sandbox, Secret};
use sim::fake_api::{Script, Shared};
use sim::{assert_no_pods_left, count_lines, counting, text_file, with_script, IMAGE};

/// The pods the backend made for a pool: made before any run, waiting in
/// their `inputs` container for the attempt number and the archive.
fn pool_pods(fake: &Shared) -> Vec<serde_json::Value> {
    fake.record(|r| {
        r.created
            .iter()
            .filter(|p| {
                p["spec"]["initContainers"][0]["command"]
                    .to_string()
                    .contains("read -r attempt")
            })
            .cloned()
            .collect()
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_one_shot_pool_hands_a_waiting_pod_its_job() {
    let (client, fake) = with_script(Script::exits(0, "counted\n", counting())).await;
    let dir = tempfile::tempdir().unwrap();
    let job = count_lines();
    let pool = client
        .pool(&job, dockhand::pool::PoolConfig::new(2))
        .await
        .expect("a pool on the cluster");
    assert!(
        pool.wait_ready(Duration::from_secs(30)).await,
        "{:?}",
        pool.stats()
    );
    let made = pool_pods(&fake);
    assert_eq!(made.len(), 2, "two pods made ahead");
    for pod in &made {
        // The job is not in the spec: the inputs bring it.
        let text = pod.to_string();
        assert!(!text.contains("grep -c"), "{text}");
        assert!(!text.contains("DOCKHAND_ATTEMPT\",\"value"), "{text}");
    }
    let before = fake.record(|r| r.created.len());
    let out = pool
        .run([("text", text_file(&dir, "a\nb\n"))])
        .await
        .expect("a pooled run");
    assert_eq!(out.get::<i64>("lines").unwrap(), 2);
    assert!(pool.stats().handed_over >= 1, "{:?}", pool.stats());
    // The run's pod is one made before it; what reached it: the attempt
    // number, then the archive with the handover script of the job.
    let used: Vec<String> = made
        .iter()
        .filter_map(|p| p["metadata"]["name"].as_str().map(String::from))
        .collect();
    let (attempt, handover) = fake.record(|r| {
        let files = used.iter().find_map(|n| r.inputs.get(n)).cloned().unwrap();
        (
            files.get(".dockhand/attempt").cloned().unwrap(),
            files
                .iter()
                .find(|(p, _)| p.ends_with(".dockhand/cmd.sh"))
                .map(|(_, b)| b.clone())
                .unwrap(),
        )
    });
    assert_eq!(attempt, b"1\n");
    assert!(String::from_utf8_lossy(&handover).contains("grep -c ."));
    // The pool refills in the background; the run made no pod of its own.
    let refills = fake.record(|r| r.created.len()) - before;
    assert!(
        pool_pods(&fake).len() == 2 + refills,
        "only pool pods were made"
    );
    pool.shutdown().await;
    assert_no_pods_left(&fake).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_pool_of_a_sandbox_with_secrets_runs_cold() {
    let (client, fake) = with_script(Script::exits(0, "", Arc::new(|_| Vec::new()))).await;
    let with_secret = Sandbox::command("s", "true")
        .image(ImageSpec::prebuilt(IMAGE))
        .secret(Secret::value("TOKEN", "pool-s3cret"))
        .cache(CacheMode::Disable)
        .build()
        .unwrap();
    let pool = client
        .pool(&with_secret, dockhand::pool::PoolConfig::new(2))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(pool_pods(&fake).is_empty(), "no pod waits with a secret");
    pool.run(dockhand::NO_INPUTS).await.expect("a cold run");
    assert_eq!(fake.record(|r| r.created.len()), 1);
    pool.shutdown().await;
    assert_no_pods_left(&fake).await;
}
