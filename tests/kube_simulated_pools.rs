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

/// A pool bigger than the cluster can place: each fill fails within the
/// pool's start limit with the scheduler's own reason (no word of Docker),
/// and the pods it made are removed.
#[tokio::test(flavor = "multi_thread")]
async fn simulated_pool_the_cluster_cannot_place_says_why() {
    let script = Script {
        unschedulable: true,
        ..Script::exits(0, "counted\n", counting())
    };
    let (client, fake) = with_script(script).await;
    let config = dockhand::pool::PoolConfig::new(2).start_limit(Duration::from_secs(2));
    let pool = client.pool(&count_lines(), config).await.expect("a pool");
    assert!(!pool.wait_ready(Duration::from_secs(4)).await);
    let stats = pool.stats();
    let why = stats.last_failure.clone().unwrap_or_default();
    assert!(stats.fill_failures >= 1, "{stats:?}");
    assert!(why.contains("could not place pod"), "{why}");
    assert!(why.contains("Insufficient cpu"), "{why}");
    assert!(!why.to_lowercase().contains("docker"), "{why}");
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

/// A client of a simulated server where agent-sandbox is installed (or not),
/// with `KubeConfig::agent_sandbox` as `choice` says.
async fn with_agent_sandbox(
    script: Script,
    choice: Option<bool>,
) -> (dockhand::Result<dockhand::Client>, Shared) {
    let (url, fake) = sim::fake_api::start("sim", script).await;
    let mut config = dockhand::KubeConfig::url(&url).namespace("sim");
    if let Some(choice) = choice {
        config = config.agent_sandbox(choice);
    }
    let client = dockhand::Client::builder()
        .kubernetes(config)
        .cache_dir(std::env::temp_dir().join("dockhand-kube-sim-cache"))
        .connect()
        .await;
    (client, fake)
}

/// The agent-sandbox objects of `plural` the backend created, as sent.
fn created(fake: &Shared, plural: &str) -> Vec<serde_json::Value> {
    fake.record(|r| {
        r.custom_created
            .iter()
            .filter(|(p, _)| p == plural)
            .map(|(_, o)| o.clone())
            .collect()
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_agent_sandbox_pool_claims_a_warm_pod_per_run() {
    let script = Script {
        agent_sandbox: true,
        ..Script::exits(0, "counted\n", counting())
    };
    let (client, fake) = with_agent_sandbox(script, None).await;
    let client = client.expect("connect");
    let dir = tempfile::tempdir().unwrap();
    let pool = client
        .pool(&count_lines(), dockhand::pool::PoolConfig::new(2))
        .await
        .expect("a pool on agent-sandbox");
    assert!(
        pool.wait_ready(Duration::from_secs(30)).await,
        "{:?}",
        pool.stats()
    );
    // One template of the pool's pod and one warm pool of its size, both
    // owned by this process's lease; the backend made no pod itself.
    let (templates, pools) = (
        created(&fake, "sandboxtemplates"),
        created(&fake, "sandboxwarmpools"),
    );
    assert_eq!((templates.len(), pools.len()), (1, 1));
    let (template, warm_pool) = (&templates[0], &pools[0]);
    assert_eq!(warm_pool["spec"]["replicas"], 2);
    assert_eq!(
        warm_pool["spec"]["sandboxTemplateRef"]["name"],
        template["metadata"]["name"]
    );
    let lease_uid = fake.record(|r| r.leases.values().next().unwrap()["metadata"]["uid"].clone());
    for object in [template, warm_pool] {
        assert_eq!(object["metadata"]["ownerReferences"][0]["uid"], lease_uid);
        assert_eq!(object["metadata"]["labels"]["dev.dockhand.managed"], "true");
    }
    let pod = &template["spec"]["podTemplate"];
    assert!(pod["spec"]["initContainers"][0]["command"]
        .to_string()
        .contains("read -r attempt"));
    assert_eq!(pod["metadata"]["labels"]["dev.dockhand.network"], "none");
    assert_eq!(
        template["spec"]["networkPolicy"]["egress"],
        serde_json::json!([])
    );
    assert!(
        fake.record(|r| r.created.iter().all(|p| r
            .sandboxes
            .contains_key(p["metadata"]["name"].as_str().unwrap()))),
        "every pod is the controller's"
    );

    let warm_before: Vec<String> = fake.record(|r| r.pods.keys().cloned().collect());
    // Two runs: each claims a warm sandbox, gets its inputs to that pod,
    // and deletes its claim (and so the pod) when it ends.
    for text in ["a\nb\n", "a\nb\nc\n"] {
        let out = pool
            .run([("text", text_file(&dir, text))])
            .await
            .expect("a run on a claimed sandbox");
        assert_eq!(
            out.get::<i64>("lines").unwrap() as usize,
            text.lines().count()
        );
    }
    let claims = created(&fake, "sandboxclaims");
    assert_eq!(claims.len(), 2, "one claim per run");
    for claim in &claims {
        assert_eq!(
            claim["spec"]["warmPoolRef"]["name"],
            warm_pool["metadata"]["name"]
        );
        assert_eq!(claim["metadata"]["ownerReferences"][0]["uid"], lease_uid);
    }
    assert_eq!(fake.record(|r| r.warm_claims), 2, "both found one ready");
    // The inputs went to the claimed pods, which were made before the runs.
    let fed = fake.record(|r| {
        r.inputs
            .keys()
            .filter(|k| !k.contains('/'))
            .cloned()
            .collect::<Vec<_>>()
    });
    assert!(
        fed.iter().all(|pod| warm_before.contains(pod)),
        "{fed:?} are among the pods warm before the runs: {warm_before:?}"
    );
    assert_eq!(fed.len(), 2, "{fed:?}");
    let stats = pool.stats();
    assert_eq!((stats.handed_over, stats.misses), (2, 0), "{stats:?}");
    // The claims are gone, and their pods: the pool holds its two again.
    for _ in 0..250 {
        let left = fake.record(|r| {
            let claims = r
                .custom
                .keys()
                .filter(|k| k.starts_with("sandboxclaims/"))
                .count();
            let used = fed.iter().filter(|p| r.pods.contains_key(*p)).count();
            claims + used
        });
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(fake.record(|r| r.custom.keys().all(|k| !k.starts_with("sandboxclaims/"))));
    assert!(pool.wait_ready(Duration::from_secs(30)).await);
    pool.shutdown().await;
    assert_no_pods_left(&fake).await;
    assert!(
        fake.record(|r| r.custom.is_empty()),
        "the template and pool are deleted"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_dropped_agent_sandbox_pool_and_unbound_claims_leave_nothing() {
    let script = Script {
        agent_sandbox: true,
        claims_unbound: true,
        ..Script::exits(0, "counted\n", counting())
    };
    let (client, fake) = with_agent_sandbox(script, Some(true)).await;
    let client = client.expect("connect");
    let job = Sandbox::command("count", "true")
        .image(ImageSpec::prebuilt(IMAGE))
        .timeout(Duration::from_secs(3))
        .cache(CacheMode::Disable)
        .build()
        .unwrap();
    let pool = client
        .pool(&job, dockhand::pool::PoolConfig::new(1))
        .await
        .expect("a pool on agent-sandbox");
    assert!(pool.wait_ready(Duration::from_secs(30)).await);
    // The controller never binds: the claim waits as long as a pool waits,
    // then the run starts cold (the run's timeout counts from its program,
    // not from the wait) and its claim is deleted.
    let out = pool.run(dockhand::NO_INPUTS).await.expect("a cold run");
    assert_eq!(out.stdout.text, "counted\n");
    assert_eq!(pool.stats().misses, 1);
    assert!(fake.record(|r| r.custom.keys().all(|k| !k.starts_with("sandboxclaims/"))));
    // Dropped without a shutdown: its guard deletes the pool and template.
    drop(pool);
    for _ in 0..300 {
        if fake.record(|r| r.custom.is_empty()) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let left: Vec<String> = fake.record(|r| r.custom.keys().cloned().collect());
    assert!(left.is_empty(), "left behind: {left:?}");
    assert_no_pods_left(&fake).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_agent_sandbox_asked_for_where_it_is_not_installed() {
    let (client, fake) =
        with_agent_sandbox(Script::exits(0, "", Arc::new(|_| Vec::new())), Some(true)).await;
    let client = client.expect("connect");
    let err = client
        .pool(&count_lines(), dockhand::pool::PoolConfig::new(1))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("extensions.agents.x-k8s.io/v1beta1") && text.contains("agent_sandbox"),
        "{text}"
    );
    assert!(fake.record(|r| r.created.is_empty() && r.custom_created.is_empty()));
    // Left to itself, the backend makes its own pool pods there.
    let (client, fake) =
        with_agent_sandbox(Script::exits(0, "", Arc::new(|_| Vec::new())), None).await;
    let pool = client
        .expect("connect")
        .pool(&count_lines(), dockhand::pool::PoolConfig::new(1))
        .await
        .unwrap();
    assert!(pool.wait_ready(Duration::from_secs(30)).await);
    assert_eq!(pool_pods(&fake).len(), 1);
    assert!(fake.record(|r| r.custom_created.is_empty()));
    pool.shutdown().await;
    assert_no_pods_left(&fake).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_agent_sandbox_session_pool_claims_started_pods() {
    use dockhand::session::{SessionApi, SessionConfig};
    let script = Script {
        agent_sandbox: true,
        ..Script::idle()
    };
    let (client, fake) = with_agent_sandbox(script, None).await;
    let client = client.expect("connect");
    let config = SessionConfig::new()
        .image(ImageSpec::prebuilt(IMAGE))
        .name("work");
    let pool = client
        .session_pool(config, dockhand::pool::PoolConfig::new(2))
        .await
        .expect("a session pool on agent-sandbox");
    assert!(
        pool.wait_ready(Duration::from_secs(30)).await,
        "{:?}",
        pool.stats()
    );
    // Every pod of the template installs the agent from its image: no
    // ConfigMap is made for it.
    let maps = fake.record(|r| {
        r.companions_created
            .iter()
            .filter(|(kind, _)| *kind == "configmaps")
            .count()
    });
    assert_eq!(maps, 0);
    let template = &created(&fake, "sandboxtemplates")[0];
    let install = &template["spec"]["podTemplate"]["spec"]["initContainers"][0];
    assert_eq!(install["name"], "install-agent", "{template}");
    let warm_before: Vec<String> = fake.record(|r| r.pods.keys().cloned().collect());

    let session = pool.session().await.expect("a session from a claimed pod");
    let hello = session.exec("echo hello from the pod").await.unwrap();
    assert_eq!(hello.exit_code, 0);
    let claims = created(&fake, "sandboxclaims");
    assert_eq!(claims.len(), 1);
    let pod = session
        .describe()
        .container_id
        .expect("a running session's pod");
    assert!(
        warm_before.contains(&pod),
        "{pod} was warm: {warm_before:?}"
    );
    assert_eq!(fake.record(|r| r.warm_claims), 1);
    // The agent was asked `hello` first, over the claimed pod's attach stream.
    let first = fake.record(|r| {
        r.agent_requests
            .iter()
            .find(|(p, _)| *p == pod)
            .map(|(_, request)| request["type"].clone())
    });
    assert_eq!(first, Some(serde_json::json!("hello")));

    session.close().await.unwrap();
    for _ in 0..250 {
        let left = fake.record(|r| {
            r.pods.contains_key(&pod) || r.custom.keys().any(|k| k.starts_with("sandboxclaims/"))
        });
        if !left {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !fake.record(|r| r.pods.contains_key(&pod)),
        "the claimed pod is gone"
    );
    pool.shutdown().await;
    assert_no_pods_left(&fake).await;
    assert!(fake.record(|r| r.custom.is_empty() && r.config_maps.is_empty()));
}

#[tokio::test(flavor = "multi_thread")]
async fn simulated_agent_sandbox_code_host_pool_claims_a_started_pod() {
    use dockhand::codemode::CodeHostConfig;
    let script = Script {
        agent_sandbox: true,
        ..Script::idle()
    };
    let (client, fake) = with_agent_sandbox(script, None).await;
    let client = client.expect("connect");
    let pool = client
        .code_host_pool(
            CodeHostConfig::new().image(ImageSpec::prebuilt(IMAGE)),
            dockhand::pool::PoolConfig::new(1),
        )
        .await
        .expect("a code host pool on agent-sandbox");
    assert!(
        pool.wait_ready(Duration::from_secs(30)).await,
        "{:?}",
        pool.stats()
    );
    let template = &created(&fake, "sandboxtemplates")[0];
    let pod = &template["spec"]["podTemplate"];
    assert_eq!(pod["spec"]["containers"][0]["name"], "bridge");
    assert_eq!(pod["metadata"]["labels"]["dev.dockhand.network"], "none");
    let warm_before: Vec<String> = fake.record(|r| r.pods.keys().cloned().collect());

    let host = pool.host().await.expect("a code host from a claimed pod");
    let pod = host.describe().container_id.expect("a running host's pod");
    assert!(
        warm_before.contains(&pod),
        "{pod} was warm: {warm_before:?}"
    );
    // A tool call crosses the claimed pod's attach stream to the host and back.
    let done = host
        .execute(
            "add(a=a, b=b)",
            serde_json::json!({"a": 20, "b": 22}),
            &sim::add_tool(),
        )
        .await
        .unwrap();
    assert_eq!(done.value, serde_json::json!(42));
    assert_eq!(pool.stats().handed_over, 1);
    host.close().await.unwrap();
    pool.shutdown().await;
    assert_no_pods_left(&fake).await;
    assert!(
        fake.record(|r| r.custom.is_empty()),
        "claim, pool and template deleted"
    );
}
