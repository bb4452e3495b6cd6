//! Benchmark: what an egress allow-list costs. Prints, in one run:
//! - the time a one-shot with an allow-list takes, beside one without;
//! - request latency (p50, p95) and throughput through the gateway (its
//!   proxy, and transparently by DNS and the Host header or TLS server
//!   name), beside a direct connection, to a local test server.
//!
//! Everything stays on this machine: the server is a container on a network
//! of the benchmark's own.
//!
//! ```text
//! cargo run --release --example bench_egress -- [N]
//! ```

#[path = "../tests/common/egress_servers.rs"]
mod egress_servers;

use std::time::{Duration, Instant};

use dockhand::pool::PoolConfig;
use dockhand::{Client, Egress, ImageSpec, Network, Sandbox, Type};

/// Times `n` keep-alive GETs on one connection, then `threads` connections
/// doing `n` each at once; prints JSON with p50/p95 in µs and requests/s.
const LOAD: &str = r#"
import http.client, json, socket, ssl, threading, time
def connection():
    if mode == "proxy":
        # The gateway is what DNS answers for a listed name.
        gateway = socket.gethostbyname(host)
        return http.client.HTTPConnection(gateway, 3128, timeout=10), "http://" + host + "/"
    if scheme == "https":
        # One handshake per connection, the same both ways: not verified here.
        return http.client.HTTPSConnection(host, 443, timeout=10, context=ssl._create_unverified_context()), "/"
    return http.client.HTTPConnection(host, 80, timeout=10), "/"
def run(count, times):
    conn, path = connection()
    for _ in range(count):
        started = time.perf_counter()
        conn.request("GET", path, headers={"Host": "api.example.test"})
        response = conn.getresponse()
        response.read()
        assert response.status == 200, response.status
        times.append(time.perf_counter() - started)
    conn.close()
warm = []
run(50, warm)
times = []
run(n, times)
times.sort()
spread = []
workers = [threading.Thread(target=run, args=(n, spread)) for _ in range(threads)]
started = time.perf_counter()
for w in workers: w.start()
for w in workers: w.join()
elapsed = time.perf_counter() - started
result = json.dumps({"p50_us": times[len(times) // 2] * 1e6, "p95_us": times[int(len(times) * 0.95)] * 1e6,
                     "rps": threads * n / elapsed})
"#;

fn p50(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

async fn load(
    client: &Client,
    network: Network,
    (mode, scheme, host): (&str, &str, &str),
    n: i64,
) -> Result<serde_json::Value, Box<dyn std::error::Error>> {
    let sandbox = Sandbox::code("bench-egress-load", LOAD)
        .input("mode", Type::Str)
        .input("scheme", Type::Str)
        .input("host", Type::Str)
        .input("n", Type::Int)
        .input("threads", Type::Int)
        .output("result", Type::Str)
        .network(network)
        .build()?;
    let inputs: [(&str, dockhand::Value); 5] = [
        ("mode", mode.into()),
        ("scheme", scheme.into()),
        ("host", host.into()),
        ("n", n.into()),
        ("threads", 4.into()),
    ];
    let out = client.run(&sandbox, inputs).await?;
    Ok(serde_json::from_str(&out.get::<String>("result")?)?)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let base = Client::connect().await?;
    let image = base.resolve_image(&ImageSpec::default()).await?;
    let servers = egress_servers::TestServers::start(&image.reference);
    let client = Client::builder()
        .egress_network(&servers.network)
        .egress_trust(&servers.ca_pem)
        .connect()
        .await?;
    let policy = Egress::allow(["api.example.test"]);

    // Start: a one-shot printing 1, with and without an allow-list. A first
    // run of each warms the images, the gateway and the daemon's caches.
    let job = |network: Network| {
        Sandbox::code("bench-egress-start", "print(1)")
            .network(network)
            .build()
    };
    let (offline, fenced) = (job(Network::None)?, job(policy.clone().into())?);
    client.run(&offline, dockhand::NO_INPUTS).await?;
    // The gateway stays up while something holds it: a session does.
    let holder = client.session(dockhand::session::SessionConfig::new().network(policy.clone()));
    holder.start().await?;
    client.run(&fenced, dockhand::NO_INPUTS).await?;
    let (mut without, mut with) = (Vec::new(), Vec::new());
    // Each start with the daemon idle: a way out taken is made again in
    // the background, which would otherwise slow whatever runs next.
    let settle = Duration::from_millis(1500);
    for _ in 0..n {
        tokio::time::sleep(settle).await;
        let t = Instant::now();
        client.run(&offline, dockhand::NO_INPUTS).await?;
        without.push(t.elapsed());
        tokio::time::sleep(settle).await;
        let t = Instant::now();
        client.run(&fenced, dockhand::NO_INPUTS).await?;
        with.push(t.elapsed());
    }
    // The same through pools: a warm container comes with its way out made.
    let fill = Duration::from_secs(60);
    let (offline_pool, fenced_pool) = (
        client.pool(&offline, PoolConfig::new(1)).await?,
        client.pool(&fenced, PoolConfig::new(1)).await?,
    );
    let (mut pooled_without, mut pooled_with) = (Vec::new(), Vec::new());
    for _ in 0..n {
        offline_pool.wait_ready(fill).await;
        tokio::time::sleep(settle).await;
        let t = Instant::now();
        offline_pool.run(dockhand::NO_INPUTS).await?;
        pooled_without.push(t.elapsed());
        fenced_pool.wait_ready(fill).await;
        tokio::time::sleep(settle).await;
        let t = Instant::now();
        fenced_pool.run(dockhand::NO_INPUTS).await?;
        pooled_with.push(t.elapsed());
    }
    drop((offline_pool, fenced_pool));
    let (without, with) = (p50(without), p50(with));
    let (pooled_without, pooled_with) = (p50(pooled_without), p50(pooled_with));
    println!("one-shot start, n={n} each (p50, whole run)");
    println!(
        "  no network            {:>7.1} ms",
        without.as_secs_f64() * 1e3
    );
    println!(
        "  allow-list            {:>7.1} ms   ({:+.1} ms)",
        with.as_secs_f64() * 1e3,
        (with.as_secs_f64() - without.as_secs_f64()) * 1e3
    );
    println!(
        "  pooled, no network    {:>7.1} ms",
        pooled_without.as_secs_f64() * 1e3
    );
    println!(
        "  pooled, allow-list    {:>7.1} ms   ({:+.1} ms)",
        pooled_with.as_secs_f64() * 1e3,
        (pooled_with.as_secs_f64() - pooled_without.as_secs_f64()) * 1e3
    );

    let requests = 1000;
    println!("\nrequests to a local test server: {requests} keep-alive GETs on one connection, then 4 connections at once");
    let direct = Network::Named(servers.network.clone());
    let fenced: Network = policy.clone().into();
    for (label, network, how) in [
        (
            "direct, http",
            direct.clone(),
            ("direct", "http", servers.address.as_str()),
        ),
        (
            "gateway proxy, http",
            fenced.clone(),
            ("proxy", "http", "api.example.test"),
        ),
        (
            "gateway by DNS, http",
            fenced.clone(),
            ("direct", "http", "api.example.test"),
        ),
        (
            "direct, https",
            direct.clone(),
            ("direct", "https", "api.example.test"),
        ),
        (
            "gateway by DNS, https",
            fenced.clone(),
            ("direct", "https", "api.example.test"),
        ),
    ] {
        let result = load(&client, network, how, requests).await?;
        println!(
            "  {label:<24} p50 {:>6.0} µs  p95 {:>6.0} µs  {:>7.0} req/s",
            result["p50_us"].as_f64().unwrap_or_default(),
            result["p95_us"].as_f64().unwrap_or_default(),
            result["rps"].as_f64().unwrap_or_default()
        );
    }
    holder.close().await?;
    Ok(())
}
