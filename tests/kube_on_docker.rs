//! The Kubernetes backend against the SIMULATED API server, with a kubelet
//! that runs sessions' and code hosts' pods as real Docker containers
//! (tests/kube/fake_api/docker_kubelet.rs).
//!
//! The API server is still a simulation, but what runs in the pods is
//! dockhand's own: the real session agent (copied in from its image by the
//! pod's init container), the real compiled bridge under
//! Monty, a real ipykernel behind the kernel's relay, all spoken to through
//! the attach WebSocket (`v5.channel.k8s.io`) as on a cluster, from images
//! the Docker backend made (the images a user would push). A kubelet starts
//! a container before anyone attaches; so does this one, and what the
//! container prints before the attach is not on the stream.

#[path = "common/busybox.rs"]
mod busybox;
mod common;
#[path = "common/registry.rs"]
mod registry;
#[path = "kube/mod.rs"]
mod sim;

use std::time::Duration;

use dockhand::codemode::{CodeHostConfig, Toolset};
use dockhand::image::Registry;
use dockhand::session::{Edit, SessionApi, SessionConfig};
use dockhand::{Client, ImageSpec, KubeConfig, Secret};
use serde_json::json;
use sim::fake_api::{Script, Shared};
use sim::{add_tool, assert_no_pods_left, with_script};

/// A local image, as a reference the simulated nodes "pull".
fn prebuilt(reference: &str) -> ImageSpec {
    ImageSpec::prebuilt(reference)
}

/// Waits (bounded) until no container of the simulated kubelet is left.
fn assert_no_kubelet_containers() {
    for _ in 0..100 {
        if common::containers_with_label("dev.dockhand.kube-sim=true") == 0 {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the simulated kubelet's containers were left behind");
}

/// The kernel config of the tests, its image made on the Docker daemon and
/// named as a prebuilt one (the simulated nodes run it from there).
async fn kernel_config() -> dockhand::kernel::KernelConfig {
    let config = common::kernel_config();
    let made = common::client()
        .await
        .resolve_image(&config.container_image())
        .await
        .expect("the kernel image");
    config.image(prebuilt(&made.reference))
}

async fn cluster() -> (Client, Shared) {
    agent_image().await;
    with_script(Script::on_docker()).await
}

/// The session agent's image, made on the Docker daemon under the name a
/// cluster's pods take it by (the simulated nodes "pull" it from there).
async fn agent_image() -> String {
    common::client()
        .await
        .session_agent_image()
        .await
        .expect("the agent's image")
}

#[tokio::test(flavor = "multi_thread")]
async fn session_pod_runs_the_real_agent_through_the_attach_stream() {
    let docker = common::client().await;
    let base = docker
        .resolve_image(&ImageSpec::default())
        .await
        .expect("the base image");
    let (client, fake) = cluster().await;
    let session = client.session(
        SessionConfig::new()
            .image(prebuilt(&base.reference))
            .secret(Secret::value("TOKEN", "on-docker-s3cr3t")),
    );
    session
        .start()
        .await
        .expect("the session pod starts (hello answered)");
    let who = session.exec("id -u; echo \"$TOKEN\"").await.unwrap();
    assert_eq!(who.exit_code, 0, "{who:?}");
    assert_eq!(who.stdout, "65534\n[redacted:TOKEN]\n", "{who:?}");
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
    assert_eq!(ran.stdout, "5\n", "{ran:?}");
    // The agent is the pod's main process, offline.
    let net = session
        .exec("python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), 2)\"")
        .await
        .unwrap();
    assert_ne!(net.exit_code, 0, "no network: {net:?}");

    session.close().await.unwrap();
    assert_no_pods_left(&fake).await;
    assert_no_kubelet_containers();
}

/// The pod's image needs no interpreter and no C library: the static agent
/// comes from its own image through the pod's init container.
#[tokio::test(flavor = "multi_thread")]
async fn session_pod_on_an_image_of_busybox_alone_runs_the_static_agent() {
    let image = busybox::busybox_image();
    let (client, fake) = cluster().await;
    let session = client.session(SessionConfig::new().image(prebuilt(&image)));
    session
        .start()
        .await
        .expect("a session on an image without python3");
    let ran = session
        .exec("tr '\\0' ' ' < /proc/1/cmdline; ls /usr/bin/python3 2>&1")
        .await
        .unwrap();
    assert!(
        ran.stdout.starts_with("/.dockhand-agent/session-agent "),
        "{ran:?}"
    );
    assert!(ran.stdout.contains("No such file"), "{ran:?}");
    session.write_file("a.txt", b"binary\x00ok").await.unwrap();
    assert_eq!(session.read_file("a.txt").await.unwrap(), b"binary\x00ok");
    let edited = session.exec("wc -c < a.txt").await.unwrap();
    assert_eq!(edited.stdout.trim(), "9");
    session.close().await.unwrap();
    assert_no_pods_left(&fake).await;
    assert_no_kubelet_containers();
}

#[tokio::test(flavor = "multi_thread")]
async fn session_pod_deleted_mid_command_fails_at_once_and_starts_again() {
    let docker = common::client().await;
    let base = docker.resolve_image(&ImageSpec::default()).await.unwrap();
    let (client, fake) = cluster().await;
    let session = client.session(SessionConfig::new().image(prebuilt(&base.reference)));
    session.start().await.unwrap();
    let pod = session.describe().container_id.unwrap();
    let long = {
        let session = session.clone();
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            (session.exec("sleep 60").await, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    fake.remove_pod(&pod);
    let (outcome, took) = long.await.unwrap();
    let err = outcome.unwrap_err();
    assert!(
        matches!(err, dockhand::Error::SessionUnavailable { .. }),
        "{err:?}"
    );
    assert!(took < Duration::from_secs(15), "noticed after {took:?}");
    assert_no_kubelet_containers();

    session.start().await.expect("a new pod");
    assert_eq!(session.exec("echo again").await.unwrap().stdout, "again\n");
    session.close().await.unwrap();
    assert_no_pods_left(&fake).await;
    assert_no_kubelet_containers();
}

#[tokio::test(flavor = "multi_thread")]
async fn code_host_pod_runs_the_real_bridge_and_calls_a_host_tool() {
    let docker = common::client().await;
    let made = docker
        .code_host_image(&CodeHostConfig::new())
        .await
        .expect("the code host image");
    let (client, fake) = cluster().await;
    let host = client.code_host(CodeHostConfig::new().image(prebuilt(&made.reference)));
    host.start().await.expect("the code host pod starts");
    let tools = add_tool();
    let done = host
        .execute(
            "total = add(a=x, b=3)\nprint('total', total)\ntotal * 2",
            json!({"x": 2}),
            &tools,
        )
        .await
        .expect("code mode through the pod's attach stream");
    assert_eq!(done.value, json!(10));
    assert_eq!(done.stdout, "total 5\n");
    assert_eq!(done.tool_calls.len(), 1);
    // A REPL session keeps its namespace across executions.
    let repl = host.session();
    repl.execute("n = 41", json!({}), &Toolset::new())
        .await
        .unwrap();
    let next = repl
        .execute("n + 1", json!({}), &Toolset::new())
        .await
        .unwrap();
    assert_eq!(next.value, json!(42));

    host.close().await.unwrap();
    assert_no_pods_left(&fake).await;
    assert_no_kubelet_containers();
}

#[tokio::test(flavor = "multi_thread")]
async fn kernel_pod_runs_a_real_kernel_and_draws_a_chart() {
    let config = kernel_config().await;
    let (client, fake) = cluster().await;
    let kernel = client.kernel(config);
    kernel.start().await.expect("the kernel starts in its pod");
    kernel.run("x = 20").await.unwrap();
    let sum = kernel.run("x + 22").await.unwrap();
    assert_eq!(sum.text(), Some("42"), "{sum:?}");
    let chart = kernel
        .run("plt.plot([1, 2, 3], [2, 4, 8])\nplt.title('Growth')")
        .await
        .unwrap();
    let png = chart
        .results
        .iter()
        .find_map(|r| r.png())
        .expect("a chart as PNG");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    kernel.session().close().await.unwrap();
    assert_no_pods_left(&fake).await;
    assert_no_kubelet_containers();
}

/// A kernel pool on agent-sandbox (its controller simulated): the kernel's
/// session starts in a pod the warm pool made from the template, and the
/// real agent and kernel run there.
#[tokio::test(flavor = "multi_thread")]
async fn kernel_pool_on_agent_sandbox_runs_a_real_kernel_in_a_claimed_pod() {
    let config = kernel_config().await;
    agent_image().await;
    let (client, fake) = with_script(Script {
        agent_sandbox: true,
        ..Script::on_docker()
    })
    .await;
    let pool = client
        .kernel_pool(config, dockhand::pool::PoolConfig::new(1))
        .await
        .expect("a kernel pool on agent-sandbox");
    assert!(
        pool.wait_ready(Duration::from_secs(120)).await,
        "{:?}",
        pool.stats()
    );
    let warm: Vec<String> = fake.record(|r| r.pods.keys().cloned().collect());
    let kernel = pool.kernel().await.expect("a kernel in a claimed pod");
    let pod = kernel.session().describe().container_id.unwrap();
    assert!(warm.contains(&pod), "{pod} was warm: {warm:?}");
    kernel.run("x = 20").await.unwrap();
    let sum = kernel.run("x + 22").await.unwrap();
    assert_eq!(sum.text(), Some("42"), "{sum:?}");
    kernel.session().close().await.unwrap();
    pool.shutdown().await;
    assert_no_pods_left(&fake).await;
    assert!(fake.record(|r| r.custom.is_empty() && r.config_maps.is_empty()));
    assert_no_kubelet_containers();
}

#[tokio::test(flavor = "multi_thread")]
async fn specs_are_built_here_pushed_and_pulled_by_digest_on_the_nodes() {
    let docker = common::client().await;
    let registry = registry::TestRegistry::open(&docker).await;
    let (url, fake) = sim::fake_api::start("sim", Script::on_docker()).await;
    let client = Client::builder()
        .kubernetes(KubeConfig::url(&url).namespace("sim").push_images(
            docker.clone(),
            Registry::new(format!("{}/cluster", registry.host)),
        ))
        .cache_dir(std::env::temp_dir().join("dockhand-kube-sim-cache"))
        .connect()
        .await
        .expect("connect");
    let pushed_under = format!("{}/cluster/image@sha256:", registry.host);
    let mut pulled = Vec::new();

    // A session from a spec: built by the Docker client, pushed, and the
    // simulated node's `docker run` pulls it from the registry by digest.
    let marker = format!("pushed-{}", std::process::id());
    let spec = common::with_host_ca(
        ImageSpec::default().run(format!("echo {marker} > /etc/dockhand-marker")),
    );
    let session = client.session(SessionConfig::new().image(spec.clone()));
    session.start().await.expect("a session pod from a spec");
    let image = session.describe().image.expect("the session's image");
    assert!(image.starts_with(&pushed_under), "{image}");
    let named = fake.record(|r| r.pods.values().any(|p| p.to_string().contains(&image)));
    assert!(named, "the pod names the pushed digest");
    let marker_seen = session.exec("cat /etc/dockhand-marker").await.unwrap();
    assert_eq!(marker_seen.stdout, format!("{marker}\n"), "{marker_seen:?}");
    session.close().await.unwrap();
    pulled.push(image);

    // A code host from a spec: the bridge is added here, then pushed.
    let host = client.code_host(CodeHostConfig::new());
    host.start().await.expect("a code host pod from a spec");
    let done = host
        .execute("add(a=1, b=41)", json!({}), &add_tool())
        .await
        .expect("code mode in the pushed image");
    assert_eq!(done.value, json!(42));
    let image = host.describe().image.expect("the code host's image");
    assert!(image.starts_with(&pushed_under), "{image}");
    host.close().await.unwrap();
    // A session on the code host's own spec gets that spec's image, not
    // the one with the bridge added.
    let same_spec =
        client.session(SessionConfig::new().image(common::with_host_ca(ImageSpec::default())));
    same_spec.start().await.expect("a session on the same spec");
    let plain = same_spec.describe().image.expect("its image");
    assert!(
        plain.starts_with(&pushed_under) && plain != image,
        "{plain}"
    );
    same_spec.close().await.unwrap();
    pulled.push(plain);
    pulled.push(image);
    assert_no_pods_left(&fake).await;
    assert_no_kubelet_containers();

    // Without a registry to push to, a spec is refused before any pod,
    // naming the way.
    let (plain, plain_fake) = cluster().await;
    let err = plain
        .session(SessionConfig::new().image(spec))
        .start()
        .await
        .expect_err("no registry");
    assert!(
        matches!(err, dockhand::Error::Unsupported { .. })
            && err.to_string().contains("push_images"),
        "{err}"
    );
    assert!(plain_fake.record(|r| r.pods.is_empty()));
    for reference in pulled {
        let _ = std::process::Command::new("docker")
            .args(["rmi", &reference])
            .output();
    }
}

/// A pool's pod on a cluster is made before its job: its `inputs`
/// container reads the attempt number on a line, then the archive, and its
/// program runs what the archive's handover script says. The simulated
/// kubelet only records what it was sent; here the pod's own commands run
/// for real, on those very bytes, in a container of the sandbox's image.
#[tokio::test(flavor = "multi_thread")]
async fn a_pool_pod_s_commands_run_for_real_on_what_the_backend_sent() {
    use dockhand::{CacheMode, Sandbox, Type, Value};
    let docker = common::client().await;
    let base = docker.resolve_image(&ImageSpec::default()).await.unwrap();
    let (client, fake) = with_script(Script::idle()).await;
    let job = Sandbox::command("greet", "sh")
        .args(["-c", "echo \"attempt $DOCKHAND_ATTEMPT: $(cat {{name}})\""])
        .input("name", Type::File)
        .image(prebuilt(&base.reference))
        .cache(CacheMode::Disable)
        .build()
        .unwrap();
    let pool = client
        .pool(&job, dockhand::pool::PoolConfig::new(1))
        .await
        .unwrap();
    assert!(pool.wait_ready(Duration::from_secs(30)).await);
    let dir = tempfile::tempdir().unwrap();
    let name = dir.path().join("name.txt");
    std::fs::write(&name, "pooled pod").unwrap();
    pool.run([("name", Value::file(&name))])
        .await
        .expect("the scripted run");
    pool.shutdown().await;
    let (sent, pod) = fake.record(|r| {
        let (pod, sent) = r.raw_inputs.iter().next().expect("inputs were sent");
        let spec = r
            .created
            .iter()
            .find(|p| p["metadata"]["name"] == pod.as_str());
        (sent.clone(), spec.cloned().expect("the pod"))
    });
    let inputs = pod["spec"]["initContainers"][0]["command"][2]
        .as_str()
        .unwrap();
    let program = pod["spec"]["containers"][0]["command"][2].as_str().unwrap();
    assert!(inputs.contains("read -r attempt"), "{inputs}");
    let script = format!(
        "( {inputs} ) && /bin/sh -c '{}'",
        program.replace('\'', "'\\''")
    );
    let mut child = std::process::Command::new("docker")
        .args(["run", "-i", "--rm", "--network", "none", "--user", "0"])
        .args([&base.reference, "/bin/sh", "-c", &script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("docker run");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&sent).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "attempt 1: pooled pod\n"
    );
    assert_no_pods_left(&fake).await;
}
