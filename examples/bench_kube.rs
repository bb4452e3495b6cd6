//! Benchmark: one-shot runs on a real Kubernetes cluster, and what they cost
//! the API server, beside the same cluster left idle for as long (the
//! baseline: kubelets' status updates, leases, controllers). Prints each
//! container's requests of the rendered pod (for the capacity plan), the
//! runs' latency, the API requests by verb and resource during the runs,
//! while idle, and per run, and the pod watches the API server holds.
//!
//! ```text
//! KUBECONFIG=... DOCKHAND_KUBE_NAMESPACE=ns DOCKHAND_KUBE_IMAGE=image-with-sh \
//!   cargo run --release --example bench_kube -- [RUNS] [AT_ONCE]
//! ```
//!
//! The API server's `/metrics` must be readable (cluster-admin, or a role
//! with `nonResourceURLs: ["/metrics"]`).
//!
//! Then, unless `BENCH_KUBE_STORAGE=0`, what claims cost, beside a plain
//! session pod's start in the same run (the baseline): a pausable session's
//! start (its claim made), a pause (its pod deleted), a resume on the same
//! claim, a kept session resumed by another client on another node (with
//! two nodes or more), a fork of 4 (copies of the claim) and a session that
//! mounts a volume. `DOCKHAND_KUBE_PYTHON_IMAGE` is the sessions' image,
//! `DOCKHAND_KUBE_AGENT_IMAGE` the agent's; the cluster must bind claims
//! (a default StorageClass, or PersistentVolumes without a class).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use dockhand::k8s::{self, KubeOptions};
use dockhand::{CacheMode, Client, ImageSpec, KubeConfig, Sandbox, Type};

/// `apiserver_request_total` summed by (verb, resource, subresource).
type Counts = BTreeMap<(String, String, String), f64>;

fn label<'a>(line: &'a str, name: &str) -> &'a str {
    let key = format!("{name}=\"");
    line.find(&key)
        .map(|at| {
            let rest = &line[at + key.len()..];
            &rest[..rest.find('"').unwrap_or(0)]
        })
        .unwrap_or("")
}

async fn metrics(kube: &kube::Client) -> Result<(Counts, f64), Box<dyn std::error::Error>> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = kube.request_text(request).await?;
    let mut counts = Counts::new();
    let mut pod_watchers = 0.0;
    for line in text.lines() {
        let value = || {
            line.rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        if line.starts_with("apiserver_request_total{") {
            let key = (
                label(line, "verb").to_string(),
                label(line, "resource").to_string(),
                label(line, "subresource").to_string(),
            );
            *counts.entry(key).or_default() += value();
        } else if line.starts_with("apiserver_registered_watchers{") && label(line, "kind") == "Pod"
        {
            pod_watchers += value();
        }
    }
    Ok((counts, pod_watchers))
}

fn minus(after: &Counts, before: &Counts) -> Counts {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .collect()
}

/// Kubernetes' CPU quantity (`250m`, `1`, `1.5`) in millicores.
fn millicores(q: &str) -> f64 {
    match q.strip_suffix('m') {
        Some(m) => m.parse().unwrap_or(0.0),
        None => q.parse::<f64>().unwrap_or(0.0) * 1000.0,
    }
}

/// Memory quantity (`512Mi`, `1Gi`, bytes) in MiB.
fn mebibytes(q: &str) -> f64 {
    let (n, unit) = q.split_at(q.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(q.len()));
    let n: f64 = n.parse().unwrap_or(0.0);
    match unit {
        "Ki" => n / 1024.0,
        "Mi" => n,
        "Gi" => n * 1024.0,
        "M" => n * 1e6 / 1048576.0,
        "G" => n * 1e9 / 1048576.0,
        _ => n / 1048576.0,
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let runs: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(20);
    let at_once: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(4);
    let image = std::env::var("DOCKHAND_KUBE_IMAGE").unwrap_or_else(|_| "busybox:1.36".into());
    let mut config = KubeConfig::infer();
    if let Ok(namespace) = std::env::var("DOCKHAND_KUBE_NAMESPACE") {
        config = config.namespace(namespace);
    }
    let kube = kube::Client::try_default().await?;
    let (_, watchers_before) = metrics(&kube).await?;
    let client = Client::builder().kubernetes(config).connect().await?;
    let job = Sandbox::command("greet", "sh")
        .args(["-c", "echo hello > /var/outputs/greeting"])
        .output("greeting", Type::Str)
        .image(ImageSpec::prebuilt(&image))
        .cache(CacheMode::Disable)
        .timeout(Duration::from_secs(120))
        .build()?;

    // What the pod asks of a node: the most of its init containers, or the
    // sum of its containers, whichever is more (Kubernetes' rule).
    let rendered = k8s::one_shot(
        &job,
        Vec::<(&str, dockhand::Value)>::new(),
        &KubeOptions::new(&image),
    )?;
    let spec = rendered
        .objects()
        .iter()
        .find_map(|o| match o {
            k8s::Object::Job(job) => job.spec.as_ref()?.template.spec.as_ref(),
            _ => None,
        })
        .ok_or("a Job with a pod spec")?;
    let request = |c: &k8s_openapi::api::core::v1::Container| {
        let requests = c
            .resources
            .as_ref()
            .and_then(|r| r.requests.clone())
            .unwrap_or_default();
        (
            requests.get("cpu").map_or(0.0, |q| millicores(&q.0)),
            requests.get("memory").map_or(0.0, |q| mebibytes(&q.0)),
        )
    };
    println!("rendered one-shot pod (requests):");
    let (mut sum_cpu, mut sum_mem, mut init_cpu, mut init_mem) = (0.0, 0.0, 0.0_f64, 0.0_f64);
    for c in spec.init_containers.iter().flatten() {
        let (cpu, mem) = request(c);
        println!("  init {:<10} {cpu:>6.0}m CPU {mem:>7.0} MiB", c.name);
        init_cpu = init_cpu.max(cpu);
        init_mem = init_mem.max(mem);
    }
    for c in &spec.containers {
        let (cpu, mem) = request(c);
        println!("  {:<15} {cpu:>6.0}m CPU {mem:>7.0} MiB", c.name);
        sum_cpu += cpu;
        sum_mem += mem;
    }
    println!(
        "  the pod asks       {:>6.0}m CPU {:>7.0} MiB",
        sum_cpu.max(init_cpu),
        sum_mem.max(init_mem)
    );

    // One run first: the image on the nodes, the client's lease and watch.
    let first = Instant::now();
    client
        .run(&job, Vec::<(&str, dockhand::Value)>::new())
        .await?;
    println!("first run: {:.0} ms", first.elapsed().as_secs_f64() * 1e3);

    let (before, _) = metrics(&kube).await?;
    let started = Instant::now();
    let semaphore = std::sync::Arc::new(tokio::sync::Semaphore::new(at_once.max(1)));
    let watchers = std::sync::Arc::new(std::sync::Mutex::new(0.0_f64));
    let tasks: Vec<_> = (0..runs)
        .map(|i| {
            let (client, job, semaphore, kube, watchers) = (
                client.clone(),
                job.clone(),
                semaphore.clone(),
                kube.clone(),
                watchers.clone(),
            );
            tokio::spawn(async move {
                let _turn = semaphore.acquire().await;
                let at = Instant::now();
                let out = client
                    .run(&job, Vec::<(&str, dockhand::Value)>::new())
                    .await;
                let took = at.elapsed();
                if i % at_once.max(1) == 0 {
                    if let Ok((_, open)) = metrics(&kube).await {
                        let mut most = watchers.lock().unwrap_or_else(|p| p.into_inner());
                        *most = most.max(open);
                    }
                }
                out.map(|o| (took, o.get::<String>("greeting").unwrap_or_default()))
            })
        })
        .collect();
    let (mut took, mut failed) = (Vec::new(), 0);
    for task in tasks {
        match task.await? {
            Ok((t, greeting)) if greeting.trim() == "hello" => took.push(t),
            Ok((_, greeting)) => {
                failed += 1;
                eprintln!("a run wrote {greeting:?}");
            }
            Err(e) => {
                failed += 1;
                eprintln!("a run failed: {e}");
            }
        }
    }
    if took.is_empty() {
        return Err("every run failed".into());
    }
    let busy = started.elapsed();
    let (during, _) = metrics(&kube).await?;
    tokio::time::sleep(busy).await;
    let (idle_end, idle_watchers) = metrics(&kube).await?;
    client.close().await?;

    took.sort();
    let pick = |p: f64| took[((took.len() as f64 - 1.0) * p).round() as usize];
    println!(
        "{runs} runs ({failed} failed), {at_once} at once, in {:.1} s: p50 {:.0} ms, p95 {:.0} ms",
        busy.as_secs_f64(),
        pick(0.5).as_secs_f64() * 1e3,
        pick(0.95).as_secs_f64() * 1e3
    );
    let runs_delta = minus(&during, &before);
    let idle_delta = minus(&idle_end, &during);
    println!(
        "\n{:<8} {:<22} {:>8} {:>8} {:>9}",
        "verb", "resource", "runs", "idle", "per run"
    );
    let mut keys: Vec<_> = runs_delta
        .keys()
        .chain(idle_delta.keys())
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    let (mut total_runs, mut total_idle) = (0.0, 0.0);
    for key in keys {
        let r = runs_delta.get(&key).copied().unwrap_or(0.0);
        let i = idle_delta.get(&key).copied().unwrap_or(0.0);
        total_runs += r;
        total_idle += i;
        let resource = match key.2.as_str() {
            "" => key.1.clone(),
            sub => format!("{}/{sub}", key.1),
        };
        println!(
            "{:<8} {:<22} {:>8.0} {:>8.0} {:>9.2}",
            key.0,
            resource,
            r,
            i,
            (r - i).max(0.0) / runs as f64
        );
    }
    println!(
        "{:<8} {:<22} {:>8.0} {:>8.0} {:>9.2}",
        "all",
        "",
        total_runs,
        total_idle,
        (total_runs - total_idle) / runs as f64
    );
    println!(
        "pod watches the API server held: {watchers_before:.0} before dockhand connected (kubelets', controllers'), at most {:.0} during the runs, {idle_watchers:.0} after them",
        *watchers.lock().unwrap_or_else(|p| p.into_inner())
    );
    if std::env::var("BENCH_KUBE_STORAGE").map_or(true, |v| v != "0") {
        storage(&kube).await?;
    }
    Ok(())
}

/// A client of the cluster whose pods go to `node` (any, if `None`).
async fn cluster_client(node: Option<&str>) -> Result<Client, Box<dyn std::error::Error>> {
    let mut config = KubeConfig::infer();
    if let Ok(namespace) = std::env::var("DOCKHAND_KUBE_NAMESPACE") {
        config = config.namespace(namespace);
    }
    if let Ok(agent) = std::env::var("DOCKHAND_KUBE_AGENT_IMAGE") {
        config = config.agent_image(agent);
    }
    if let Some(node) = node {
        config = config.placement(
            dockhand::k8s::Placement::new().node_selector("kubernetes.io/hostname", node),
        );
    }
    Ok(Client::builder().kubernetes(config).connect().await?)
}

/// The median of `samples`, in ms.
fn median_ms(samples: &mut [Duration]) -> f64 {
    samples.sort();
    samples[samples.len() / 2].as_secs_f64() * 1e3
}

/// Claims' costs beside a plain session pod's start (see the module's doc).
async fn storage(kube: &kube::Client) -> Result<(), Box<dyn std::error::Error>> {
    use dockhand::session::{PauseMode, SessionApi, SessionConfig};
    const ROUNDS: usize = 3;
    let image =
        std::env::var("DOCKHAND_KUBE_PYTHON_IMAGE").unwrap_or_else(|_| "python:3.12-slim".into());
    let nodes: Vec<String> = kube::Api::<k8s_openapi::api::core::v1::Node>::all(kube.clone())
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    let config = || {
        SessionConfig::new()
            .image(ImageSpec::prebuilt(&image))
            .cpus(0.2)
            .start_timeout(Duration::from_secs(300))
    };
    let client = cluster_client(None).await?;
    let timed = |at: Instant| at.elapsed();
    let (mut plain, mut claimed, mut paused, mut resumed, mut mounted) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut forked = Vec::new();
    dockhand::Volume::create(&client, "bench-volume").await?;
    for _ in 0..ROUNDS {
        let s = client.session(config());
        let at = Instant::now();
        s.start().await?;
        plain.push(timed(at));
        s.close().await?;

        let s = client.session(config().pausable(true));
        let at = Instant::now();
        s.start().await?;
        claimed.push(timed(at));
        s.write_file("state.txt", &vec![b'x'; 1 << 20]).await?;
        let at = Instant::now();
        s.pause(PauseMode::Filesystem).await?;
        paused.push(timed(at));
        let at = Instant::now();
        s.resume().await?;
        resumed.push(timed(at));
        let at = Instant::now();
        let forks = s.fork(4, PauseMode::Filesystem).await?;
        forked.push(timed(at));
        for f in forks {
            f.close().await?;
        }
        s.close().await?;

        let s = client.session(config().volume("bench-volume", "/data"));
        let at = Instant::now();
        s.start().await?;
        mounted.push(timed(at));
        s.close().await?;
    }
    dockhand::Volume::remove_named(&client, "bench-volume").await?;
    // A kept session paused by a client on one node, resumed by another
    // client on another node.
    let mut moved = Vec::new();
    if let [first, second, ..] = nodes.as_slice() {
        for _ in 0..ROUNDS {
            let one = cluster_client(Some(first)).await?;
            let s = one.session(config().keep(true));
            s.start().await?;
            s.write_file("state.txt", &vec![b'x'; 1 << 20]).await?;
            let id = s.pause(PauseMode::Filesystem).await?.id;
            drop(s);
            one.close().await?;
            let two = cluster_client(Some(second)).await?;
            let at = Instant::now();
            let s = two.resume_session(&id, config()).await?;
            moved.push(timed(at));
            s.close().await?;
            two.close().await?;
        }
    }
    client.close().await?;
    println!("\nclaims, p50 of {ROUNDS} (1 MiB in the workspace):");
    let base = median_ms(&mut plain);
    println!("  plain session pod start (baseline)   {base:>8.0} ms");
    for (what, samples) in [
        ("pausable session start (+ its claim)", &mut claimed),
        ("pause (pod deleted, claim kept)", &mut paused),
        ("resume on the claim", &mut resumed),
        ("fork of 4 (claim copies)", &mut forked),
        ("session start with a volume mounted", &mut mounted),
    ] {
        let ms = median_ms(samples);
        println!(
            "  {what:<37} {ms:>8.0} ms  ({:.2}x the baseline)",
            ms / base
        );
    }
    if moved.is_empty() {
        println!("  resume on another node: one node only");
    } else {
        let ms = median_ms(&mut moved);
        println!(
            "  kept session resumed on another node  {ms:>8.0} ms  ({:.2}x the baseline)",
            ms / base
        );
    }
    Ok(())
}
