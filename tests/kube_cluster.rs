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
//! default `busybox:1.36`), one with `python3` for the session test's
//! script (`DOCKHAND_KUBE_PYTHON_IMAGE`, default `python:3.12-slim`), the
//! session agent's image (`DOCKHAND_KUBE_AGENT_IMAGE`, default the
//! `dockhand/agent:<tag>` that `Client::session_agent_image` makes, loaded
//! onto the nodes or pushed under that name) and, for the
//! code host, a code host image dockhand made and you pushed
//! (`DOCKHAND_KUBE_CODE_HOST_IMAGE`: `Client::code_host_image` makes it on
//! a Docker daemon; that test says so and passes without it), and for the
//! kernel a kernel image you pushed (`DOCKHAND_KUBE_KERNEL_IMAGE`). With
//! `DOCKHAND_KUBE_REGISTRY` (a repository the nodes pull from, e.g.
//! `localhost:5001/dockhand` for kind's local registry), the images are
//! built from specs by the local Docker daemon and pushed there instead
//! (`KubeConfig::push_images`), and the code host test needs no image of
//! yours. `DOCKHAND_KUBE_ENFORCES_POLICY=1` (a CNI that enforces
//! NetworkPolicy) adds the egress allow-list test. Without
//! `DOCKHAND_KUBE_TEST` every test here
//! prints how to run it and passes: no cluster can run on the machines CI
//! uses (tests/kube_simulated.rs and kube_simulated_hosts.rs cover the
//! request flow there).

#[path = "kube/mod.rs"]
mod sim;

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
    connect(KubeConfig::infer()).await
}

/// A client of the cluster from `config`, with the settings the
/// environment gives (context, namespace, registry, agent image).
async fn connect(mut config: KubeConfig) -> Client {
    if let Ok(context) = std::env::var("DOCKHAND_KUBE_CONTEXT") {
        config = config.context(context);
    }
    if let Ok(namespace) = std::env::var("DOCKHAND_KUBE_NAMESPACE") {
        config = config.namespace(namespace);
    }
    if let Ok(registry) = std::env::var("DOCKHAND_KUBE_REGISTRY") {
        let docker = Client::connect()
            .await
            .expect("a local Docker daemon builds what DOCKHAND_KUBE_REGISTRY receives");
        config = config.push_images(docker, dockhand::image::Registry::new(registry));
    }
    if let Ok(agent) = std::env::var("DOCKHAND_KUBE_AGENT_IMAGE") {
        config = config.agent_image(agent);
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

/// Nothing of the test left, then the client ended: its lease goes now,
/// not when it lapses after the test's runtime is gone.
async fn finish(client: &Client) {
    assert_nothing_left(client).await;
    client.close().await.expect("the lease is deleted");
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
    finish(&client).await;
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
    finish(&client).await;
}

/// An image the nodes can pull with python3 for the session test's script
/// (`DOCKHAND_KUBE_PYTHON_IMAGE`, default `python:3.12-slim`).
fn python_image() -> String {
    std::env::var("DOCKHAND_KUBE_PYTHON_IMAGE").unwrap_or_else(|_| "python:3.12-slim".into())
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_session_exec_and_edit() {
    use dockhand::session::{Edit, SessionApi, SessionConfig};
    if !enabled("cluster_session_exec_and_edit") {
        return;
    }
    let client = client().await;
    let session = client.session(
        SessionConfig::new()
            .image(ImageSpec::prebuilt(python_image()))
            .start_timeout(Duration::from_secs(300))
            .name("cluster-test"),
    );
    session.start().await.expect("the session pod starts");
    session
        .write_file(
            "calc.py",
            b"def add(a, b):\n    return a - b\nprint(add(2, 3))\n",
        )
        .await
        .unwrap();
    session
        .edit_file("calc.py", &[Edit::replace("return a - b", "return a + b")])
        .await
        .unwrap();
    let ran = session.exec("python3 calc.py").await.unwrap();
    assert_eq!(ran.stdout.trim(), "5", "{ran:?}");
    let failed = session.exec("exit 4").await.unwrap();
    assert_eq!(failed.exit_code, 4);
    // Offline by default: the namespace's policy (where the cluster's
    // network plugin enforces NetworkPolicy).
    session.close().await.unwrap();
    finish(&client).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_code_host_with_a_tool() {
    use dockhand::codemode::CodeHostConfig;
    if !enabled("cluster_code_host_with_a_tool") {
        return;
    }
    let mut config = CodeHostConfig::new().start_timeout(Duration::from_secs(300));
    if let Ok(image) = std::env::var("DOCKHAND_KUBE_CODE_HOST_IMAGE") {
        config = config.image(ImageSpec::prebuilt(image));
    } else if std::env::var("DOCKHAND_KUBE_REGISTRY").is_err() {
        eprintln!(
            "skipped cluster_code_host_with_a_tool: set DOCKHAND_KUBE_REGISTRY to a repository the \
             nodes pull from (the code host image is then made here and pushed), or \
             DOCKHAND_KUBE_CODE_HOST_IMAGE to a code host image you pushed"
        );
        return;
    }
    let client = client().await;
    let host = client.code_host(config);
    let tools = sim::add_tool();
    let done = host
        .execute(
            "total = add(a=2, b=3)\nprint('total', total)\ntotal * 2",
            serde_json::json!({}),
            &tools,
        )
        .await
        .expect("code mode on the cluster");
    assert_eq!(done.value, serde_json::json!(10));
    assert_eq!(done.stdout, "total 5\n");
    host.close().await.unwrap();
    finish(&client).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_session_pool_handover() {
    use dockhand::pool::PoolConfig;
    use dockhand::session::{SessionApi, SessionConfig};
    if !enabled("cluster_session_pool_handover") {
        return;
    }
    let client = client().await;
    let pool = client
        .session_pool(
            SessionConfig::new()
                .image(ImageSpec::prebuilt(python_image()))
                .start_timeout(Duration::from_secs(300)),
            PoolConfig::new(2),
        )
        .await
        .unwrap();
    assert!(
        pool.wait_ready(Duration::from_secs(300)).await,
        "{:?}",
        pool.stats()
    );
    let started = std::time::Instant::now();
    let session = pool.session().await.unwrap();
    let handover = started.elapsed();
    assert_eq!(session.exec("echo warm").await.unwrap().stdout, "warm\n");
    eprintln!("handover took {handover:?}");
    pool.shutdown().await;
    session.close().await.unwrap();
    finish(&client).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_one_shot_pool_handover() {
    use dockhand::pool::PoolConfig;
    if !enabled("cluster_one_shot_pool_handover") {
        return;
    }
    let client = client().await;
    let greet = Sandbox::command("greet", "sh")
        .args(["-c", "echo \"attempt $DOCKHAND_ATTEMPT: $(cat {{name}})\""])
        .input("name", Type::File)
        .image(ImageSpec::prebuilt(image()))
        // Two such pods fit on one 2-CPU node (with the default CPU, one).
        .cpus(0.5)
        .cache(CacheMode::Disable)
        .timeout(Duration::from_secs(300))
        .build()
        .unwrap();
    let pool = client.pool(&greet, PoolConfig::new(2)).await.unwrap();
    assert!(
        pool.wait_ready(Duration::from_secs(300)).await,
        "{:?}",
        pool.stats()
    );
    let dir = tempfile::tempdir().unwrap();
    let name = dir.path().join("name.txt");
    std::fs::write(&name, "pooled").unwrap();
    let out = pool.run([("name", Value::file(&name))]).await.unwrap();
    assert_eq!(out.stdout.text, "attempt 1: pooled\n");
    assert!(pool.stats().handed_over >= 1, "{:?}", pool.stats());
    pool.shutdown().await;
    finish(&client).await;
}

/// An egress allow-list enforced by the cluster's CNI: with
/// `DOCKHAND_KUBE_ENFORCES_POLICY=1` (a CNI that enforces NetworkPolicy,
/// such as Calico or Cilium; kind's kindnet does not), a pod reaches the
/// allowed address (`DOCKHAND_KUBE_EGRESS_ALLOWED`, default `1.1.1.1:443`)
/// and not another (`DOCKHAND_KUBE_EGRESS_DENIED`, default `8.8.8.8:443`).
#[tokio::test(flavor = "multi_thread")]
async fn cluster_egress_allow_list() {
    if !enabled("cluster_egress_allow_list") {
        return;
    }
    if std::env::var("DOCKHAND_KUBE_ENFORCES_POLICY").is_err() {
        eprintln!(
            "skipped cluster_egress_allow_list: set DOCKHAND_KUBE_ENFORCES_POLICY=1 on a cluster whose CNI enforces NetworkPolicy"
        );
        return;
    }
    let allowed =
        std::env::var("DOCKHAND_KUBE_EGRESS_ALLOWED").unwrap_or_else(|_| "1.1.1.1:443".into());
    let denied =
        std::env::var("DOCKHAND_KUBE_EGRESS_DENIED").unwrap_or_else(|_| "8.8.8.8:443".into());
    let split = |entry: &str| {
        let (host, port) = entry.rsplit_once(':').expect("host:port");
        (host.to_string(), port.to_string())
    };
    let ((a_host, a_port), (d_host, d_port)) = (split(&allowed), split(&denied));
    let client = client().await;
    let probe = Sandbox::command("egress", "sh")
        .args([
            "-c",
            &format!(
                "nc -w 5 {a_host} {a_port} </dev/null && echo allowed-reached; \
                 nc -w 5 {d_host} {d_port} </dev/null && echo denied-reached || echo denied-blocked"
            ),
        ])
        .image(ImageSpec::prebuilt(image()))
        .network(dockhand::Egress::allow([allowed.as_str()]))
        .cache(CacheMode::Disable)
        .timeout(Duration::from_secs(300))
        .build()
        .unwrap();
    let out = client.run(&probe, dockhand::NO_INPUTS).await.unwrap();
    assert!(
        out.stdout.text.contains("allowed-reached"),
        "{}",
        out.stdout.text
    );
    assert!(
        out.stdout.text.contains("denied-blocked"),
        "{}",
        out.stdout.text
    );
    finish(&client).await;
}

const CHILD_ENV: &str = "DOCKHAND_KUBE_OWNER_CHILD";

/// Run as a child process by the owner-death test: starts a session pod
/// with a short owner lease, prints its name, waits to be killed.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "run as a child process by cluster_owner_death"]
async fn cluster_owner_child() {
    use dockhand::session::SessionConfig;
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    // The environment's registry and agent image, as every test's client.
    let client = connect(KubeConfig::infer().lease_duration(Duration::from_secs(10))).await;
    let session = client.session(
        SessionConfig::new()
            .image(ImageSpec::prebuilt(python_image()))
            .start_timeout(Duration::from_secs(300)),
    );
    session.start().await.expect("the session starts");
    println!("pod {}", session.describe().container_id.unwrap());
    tokio::time::sleep(Duration::from_secs(3600)).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_owner_death() {
    use std::io::BufRead;
    if !enabled("cluster_owner_death") {
        return;
    }
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "cluster_owner_child", "--ignored", "--nocapture"])
        .env(CHILD_ENV, "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let pod = stdout
        .lines()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("pod ").map(String::from))
        .expect("the child started a session");
    child.kill().unwrap();
    let _ = child.wait();
    // Another process's client sweeps the lapsed lease; the garbage
    // collector takes the pod with it.
    let client = client().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let report = client.reap().await.unwrap();
        if report.containers.contains(&pod) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the dead owner's pod {pod} was not reaped"
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    finish(&client).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_kernel_with_a_chart() {
    if !enabled("cluster_kernel_with_a_chart") {
        return;
    }
    let Ok(image) = std::env::var("DOCKHAND_KUBE_KERNEL_IMAGE") else {
        eprintln!(
            "skipped cluster_kernel_with_a_chart: set DOCKHAND_KUBE_KERNEL_IMAGE to a kernel image \
             the nodes pull (make it on Docker with `client.resolve_image(&KernelConfig::data_science().container_image())`, then push it)"
        );
        return;
    };
    let client = client().await;
    let kernel = client
        .kernel(dockhand::kernel::KernelConfig::data_science().image(ImageSpec::prebuilt(image)));
    kernel.start().await.expect("the kernel's pod starts");
    let sum = kernel.run("x = 20\nx + 22").await.unwrap();
    assert_eq!(sum.text(), Some("42"));
    let chart = kernel.run("plt.plot([1, 2, 3], [2, 4, 8])").await.unwrap();
    let png = chart.results.iter().find_map(|r| r.png()).expect("a chart");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    kernel.session().close().await.unwrap();
    finish(&client).await;
}

/// A pool bigger than the cluster can hold says why it cannot fill (the
/// scheduler's reason), and once shut down leaves the CPU it held free: a
/// session asking the same right after starts.
#[tokio::test(flavor = "multi_thread")]
async fn cluster_pool_larger_than_the_nodes_says_why() {
    use dockhand::pool::PoolConfig;
    use dockhand::session::{SessionApi, SessionConfig};
    if !enabled("cluster_pool_larger_than_the_nodes_says_why") {
        return;
    }
    let client = client().await;
    let config = SessionConfig::new()
        .image(ImageSpec::prebuilt(python_image()))
        .cpus(1.0)
        .start_timeout(Duration::from_secs(300));
    // Each pod asks a CPU; no cluster of a few 2-CPU nodes holds 12.
    let pool = client
        .session_pool(
            config.clone(),
            PoolConfig::new(12)
                .max_starting(12)
                .start_limit(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    let why = loop {
        if let Some(why) = pool.stats().last_failure {
            break why;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no failure: {:?}",
            pool.stats()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    eprintln!("the pool says: {why}; {:?}", pool.stats());
    assert!(why.contains("Insufficient cpu"), "{why}");
    assert!(!why.contains("docker"), "{why}");
    pool.shutdown().await;
    assert_nothing_left(&client).await;
    let session = client.session(config);
    session
        .start()
        .await
        .expect("the freed CPU takes a session");
    assert_eq!(
        session.exec("echo placed").await.unwrap().stdout,
        "placed\n"
    );
    session.close().await.unwrap();
    finish(&client).await;
}

/// In a process that goes on running, a client whose runtime ended under
/// it (a test's runtime, a crashed task's) leaves its lease and pod behind:
/// another client's sweep removes the lease once it lapses, with the pod;
/// the sweeping client's own session is kept.
#[tokio::test(flavor = "multi_thread")]
async fn cluster_dropped_client_leaves_nothing_in_a_running_process() {
    use dockhand::session::{SessionApi, SessionConfig};
    if !enabled("cluster_dropped_client_leaves_nothing_in_a_running_process") {
        return;
    }
    let config = || {
        SessionConfig::new()
            .image(ImageSpec::prebuilt(python_image()))
            .start_timeout(Duration::from_secs(300))
    };
    let keeper = client().await;
    let kept = keeper.session(config());
    kept.start().await.unwrap();
    // The process's pods are listed together (one owner label per process).
    let keepers = keeper.live_containers().await.unwrap();
    let pod = std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let (pod, session, client) = runtime.block_on(async {
            let client = connect(KubeConfig::infer().lease_duration(Duration::from_secs(15))).await;
            let session = client.session(config());
            session.start().await.unwrap();
            let mut pods = client.live_containers().await.unwrap();
            pods.retain(|p| !keepers.contains(p));
            assert_eq!(pods.len(), 1, "{pods:?}");
            (pods[0].clone(), session, client)
        });
        // The runtime ends first: nothing of the client can run any more.
        runtime.shutdown_background();
        drop((session, client));
        pod
    })
    .join()
    .expect("dropping a client outside its runtime does not panic");
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        let report = keeper.reap().await.unwrap();
        if report.containers.contains(&pod) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the dropped client's pod {pod} was not reaped"
        );
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    assert_eq!(kept.exec("echo kept").await.unwrap().stdout, "kept\n");
    kept.close().await.unwrap();
    finish(&keeper).await;
}
