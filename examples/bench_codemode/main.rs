//! Benchmark of code mode: host start (image already built), and on a warm
//! host a trivial execution, one tool-call round trip, and 100 gathered calls
//! of a tool that sleeps 50 ms; beside it, plain Monty (pydantic-monty in the
//! same kind of container, under the same CPU limit) on the same snippets.
//!
//! ```text
//! cargo run --release --example bench_codemode -- [N]
//! ```
//!
//! `BENCH_CPUS=2` gives the code host's container two CPUs instead of one.
//! `-- typecheck` measures only what type checking a 50-line snippet costs;
//! `-- modules` only the prompt sizes of 100 tools listed in full, with
//! search, and as a module tree, and what importing a module of 50 tools
//! costs an execution.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dockhand::codemode::{CodeHostConfig, Listing, ParamType, Tool, Toolset};
use dockhand::Client;
use serde_json::{json, Map};

fn report(name: &str, mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p).round() as usize];
    let (p50, p95) = (at(0.5), at(0.95));
    println!(
        "{name:<40} n={:<4} p50={:>8.3} ms  p95={:>8.3} ms",
        samples.len(),
        p50.as_secs_f64() * 1e3,
        p95.as_secs_f64() * 1e3
    );
    p50
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let began = Instant::now();
    let client = Client::builder()
        .on_progress(move |p| eprintln!("{:>7.1}s {p}", began.elapsed().as_secs_f64()))
        .connect()
        .await?;
    // When each sleepy call started and ended, for where the gathered
    // figure's time goes.
    let spans: Arc<Mutex<Vec<(Instant, Instant)>>> = Arc::default();
    let recorded = spans.clone();
    let tools = Toolset::new()
        .tool(
            Tool::new("noop", "Returns its argument.")
                .param("x", ParamType::Any, "")
                .handler(|a| async move { Ok(a["x"].clone()) }),
        )
        .tool(
            Tool::new("sleepy", "Sleeps 50 ms.")
                .param("x", ParamType::Any, "")
                .handler(move |a| {
                    let recorded = recorded.clone();
                    async move {
                        let started = Instant::now();
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        let span = (started, Instant::now());
                        recorded
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(span);
                        Ok(a["x"].clone())
                    }
                }),
        );
    // Host start: the first start builds or finds the image; the next ones
    // show what a start costs once it exists.
    let cpus: f64 = std::env::var("BENCH_CPUS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0);
    if std::env::args().nth(1).as_deref() == Some("typecheck") {
        type_check_cost(&client, cpus, &tools).await?;
        return Ok(());
    }
    if std::env::args().nth(1).as_deref() == Some("modules") {
        module_figures(&client, cpus).await?;
        return Ok(());
    }
    // A code host on an image spec never built before: the spec's own steps
    // plus a copy of the bridge (made once per machine, not per spec). Once
    // as the default spec plus a command (it trusts the host's certificates,
    // so their layers are shared), once without the certificates.
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos();
    let specs = [
        (
            "the default spec plus a command",
            dockhand::ImageSpec::default()
                .trust_host_certificates()
                .run(format!("echo bench-{nonce}")),
        ),
        (
            "without the host's certificates",
            dockhand::ImageSpec::default().run(format!("echo bench-{nonce}")),
        ),
    ];
    for (what, spec) in specs {
        let t = Instant::now();
        let fresh = client.code_host(CodeHostConfig::new().image(spec));
        fresh.start().await?;
        let new_spec_start = t.elapsed();
        let fresh_image = fresh.describe().image;
        fresh.close().await?;
        if let Some(image) = fresh_image {
            let _ = std::process::Command::new("docker")
                .args(["rmi", &image])
                .output();
        }
        println!(
            "first start on a new image spec ({what}; bridge made): {:.1} s",
            new_spec_start.as_secs_f64()
        );
    }

    let host = client.code_host(CodeHostConfig::new().cpus(cpus));
    host.start().await?;
    let mut starts = Vec::new();
    for _ in 0..5 {
        host.stop().await?;
        let t = Instant::now();
        host.start().await?;
        starts.push(t.elapsed());
    }
    for _ in 0..20 {
        host.execute("1 + 1", Map::new(), &tools).await?;
    }

    // Trivial execution, end to end as the caller sees it.
    let mut trivial = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let run = host.execute("1 + 1", Map::new(), &tools).await?;
        trivial.push(t.elapsed());
        assert_eq!(run.value, json!(2));
    }

    // The same with a pause before each, as between the turns of a model:
    // the bridge has its interpreters checked out and ready.
    let mut paced = Vec::with_capacity(n / 2);
    for _ in 0..(n / 2).max(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let t = Instant::now();
        host.execute("1 + 1", Map::new(), &tools).await?;
        paced.push(t.elapsed());
    }

    // Loops of 10,000 iterations, with no guard (the default policy) and
    // with the strict policy's guard: over a range (a sized container the
    // guard lets through at full speed) and over a generator-like iterator
    // (every iteration counted).
    let strict = client.code_host(
        CodeHostConfig::new()
            .cpus(cpus)
            .policy(dockhand::codemode::CodePolicy::Strict),
    );
    strict.start().await?;
    const RANGE_LOOP: &str = "t = 0\nfor i in range(10000):\n    t += i\nt";
    const ITER_LOOP: &str = "t = 0\nfor i in iter(range(10000)):\n    t += i\nt";
    let loops = [
        (
            "a range loop of 10,000, no guard",
            loop_times(&host, RANGE_LOOP, &tools).await?,
        ),
        (
            "  the same, strict guard",
            loop_times(&strict, RANGE_LOOP, &tools).await?,
        ),
        (
            "an iterator loop of 10,000, no guard",
            loop_times(&host, ITER_LOOP, &tools).await?,
        ),
        (
            "  the same, strict guard",
            loop_times(&strict, ITER_LOOP, &tools).await?,
        ),
    ];
    strict.close().await?;

    // 100 gathered 50 ms sleeps: they overlap.
    let mut sleeps = Vec::with_capacity(20);
    for _ in 0..20 {
        let t = Instant::now();
        let run = host
            .execute(
                "r = await gather(*[asyncio.sleep(0.05) for _ in range(100)])\nlen(r)",
                Map::new(),
                &tools,
            )
            .await?;
        sleeps.push(t.elapsed());
        assert_eq!(run.value, json!(100));
    }

    // Tool round trip: an execution with K sequential calls, minus a trivial
    // one, divided by K.
    const K: usize = 50;
    let code = format!("t = 0\nfor i in range({K}):\n    t += noop(i)\nt");
    let mut round_trips = Vec::with_capacity(n / 4);
    for _ in 0..(n / 4).max(5) {
        let t0 = Instant::now();
        host.execute("1 + 1", Map::new(), &tools).await?;
        let base = t0.elapsed();
        let t = Instant::now();
        let run = host.execute(&code, Map::new(), &tools).await?;
        let with_calls = t.elapsed();
        assert_eq!(run.tool_calls.len(), K);
        round_trips.push(with_calls.saturating_sub(base) / K as u32);
    }

    // 100 gathered calls of a 50 ms tool (30 runs: one run varies by a
    // millisecond or two with the machine's timers).
    let mut gathered = Vec::new();
    // The slowest call's own time, as the host timed its handler: what the
    // tool itself took (a tokio sleep of 50 ms ends on a millisecond tick).
    let mut slowest_call = Vec::new();
    let (mut to_first_start, mut to_last_start, mut after_last_end) =
        (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..30 {
        spans.lock().unwrap_or_else(|e| e.into_inner()).clear();
        let t = Instant::now();
        let run = host
            .execute(
                "rs = await gather(*[sleepy(i) for i in range(100)])\nlen(rs)",
                Map::new(),
                &tools,
            )
            .await?;
        let ended = Instant::now();
        gathered.push(ended - t);
        assert_eq!(run.value, json!(100));
        let spans = spans.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let (Some(first_start), Some(last_start), Some(last_end)) = (
            spans.iter().map(|s| s.0).min(),
            spans.iter().map(|s| s.0).max(),
            spans.iter().map(|s| s.1).max(),
        ) {
            to_first_start.push(first_start - t);
            to_last_start.push(last_start - t);
            after_last_end.push(ended - last_end);
        }
        let slowest = run.tool_calls.iter().map(|c| c.duration).max();
        slowest_call.push(slowest.unwrap_or_default());
    }

    println!("code mode:");
    let p_start = report("host start (image built)", starts);
    let p_trivial = report("trivial execution, back to back", trivial);
    let p_paced = report("trivial execution, 20 ms apart", paced);
    let mut p_loops = Vec::new();
    for (name, samples) in loops {
        p_loops.push(report(name, samples));
    }
    report("100 gathered 50 ms sleeps", sleeps);
    let p_rt = report("tool-call round trip", round_trips);
    let p_gather = report("100 gathered calls of a 50 ms tool", gathered);
    report("  the slowest of those calls by itself", slowest_call);
    report("  the first call began after", to_first_start);
    report("  the last call began after", to_last_start);
    report("  the value came after the last ended", after_last_end);
    let plain = plain_monty(&client, cpus).await?;
    println!("plain Monty (pydantic-monty in the code host's image, the same CPU limit):");
    for (name, ms) in &plain {
        println!("{name:<40} p50={ms:>8.3} ms");
    }
    println!(
        "targets: start <= 300 ms ({:.0}), trivial p50 <= 0.2 ms ({:.2} back to back, {:.2} paced), round trip p50 <= 0.1 ms ({:.3}), gathered ~ 50 ms ({:.1}, {:.2}x of 50 ms)",
        p_start.as_secs_f64() * 1e3,
        p_trivial.as_secs_f64() * 1e3,
        p_paced.as_secs_f64() * 1e3,
        p_rt.as_secs_f64() * 1e3,
        p_gather.as_secs_f64() * 1e3,
        p_gather.as_secs_f64() / 0.05
    );
    let ratio = |guarded: Duration, plain: Duration| guarded.as_secs_f64() / plain.as_secs_f64();
    println!(
        "loop guard: {:.2}x over a range, {:.2}x over an iterator (target <= 1.5x)",
        ratio(p_loops[1], p_loops[0]),
        ratio(p_loops[3], p_loops[2])
    );
    let plain_ms = |name: &str| plain.iter().find(|(n, _)| n == name).map(|(_, ms)| *ms);
    if let (Some(feed), Some(iter), Some(call)) = (
        plain_ms(PLAIN_FEED),
        plain_ms(PLAIN_ITER),
        plain_ms(PLAIN_CALL),
    ) {
        println!(
            "beside plain Monty: a trivial execution {:.2}x a feed on a held session; \
             the guarded iterator loop {:.2}x plain Monty's; a tool-call round trip {:.2}x an external call's",
            p_trivial.as_secs_f64() * 1e3 / feed,
            p_loops[3].as_secs_f64() * 1e3 / iter,
            p_rt.as_secs_f64() * 1e3 / call
        );
    }
    host.close().await?;
    type_check_cost(&client, cpus, &tools).await?;
    module_figures(&client, cpus).await?;
    Ok(())
}

/// `count` tools like an API's: two parameters each, a one-line summary and
/// a longer description, `per_module` to a module.
fn api_tools(count: usize, per_module: usize) -> Toolset {
    (0..count).fold(Toolset::new(), |tools, i| {
        let module = format!("service{}", i / per_module);
        tools.tool(
            Tool::new(
                format!("{module}_op{i}"),
                format!(
                    "Operation {i} of {module}. Looks up records by id and returns \
                     the matching ones with their fields, newest first."
                ),
            )
            .param("record_id", ParamType::Str, "the record's id")
            .optional_param("limit", ParamType::Int, "how many to return")
            .returns("list[dict]")
            .in_module(module)
            .handler(|a| async move { Ok(json!([{"id": a["record_id"]}])) }),
        )
    })
}

/// Prompt sizes for 100 tools three ways, and what importing a module of
/// 50 tools costs an execution.
async fn module_figures(client: &Client, cpus: f64) -> Result<(), Box<dyn std::error::Error>> {
    let tools = api_tools(100, 10);
    let full = tools.clone().listing(Listing::Full).prompt();
    let search = tools.clone().listing(Listing::Search).prompt();
    let modules = tools.clone().listing(Listing::Modules);
    let tree = modules.prompt();
    // Before its first call the model also reads one tool's description
    // (search) or one module (the tree).
    let one_tool = tools
        .iter()
        .next()
        .map(|t| t.python_signature())
        .unwrap_or_default();
    let one_module = modules.module_source("tools.service0").unwrap_or_default();
    println!("prompt for 100 tools (bytes; then with what is read before the first call):");
    println!("{:<40} {:>7}", "flat listing, every signature", full.len());
    println!(
        "{:<40} {:>7}  {:>7} with describe_tool of one",
        "names and summaries, search/describe",
        search.len(),
        search.len() + one_tool.len()
    );
    println!(
        "{:<40} {:>7}  {:>7} with read_module of one (10 tools)",
        "module tree",
        tree.len(),
        tree.len() + one_module.len()
    );

    let big = api_tools(50, 50);
    let host = client.code_host(CodeHostConfig::new().cpus(cpus));
    host.start().await?;
    let times = |code: &'static str| {
        let host = &host;
        let big = &big;
        async move {
            for _ in 0..10 {
                host.execute(code, Map::new(), big).await?;
            }
            let mut samples = Vec::with_capacity(60);
            for _ in 0..60 {
                let t = Instant::now();
                host.execute(code, Map::new(), big).await?;
                samples.push(t.elapsed());
            }
            Ok::<_, dockhand::Error>(samples)
        }
    };
    let base = report("trivial execution, 50 tools offered", times("1 + 1").await?);
    let imported = report(
        "  importing their module of 50 tools",
        times("import tools.service0\n1 + 1").await?,
    );
    let called = report(
        "  importing one of them and calling it",
        times("from tools.service0 import service0_op7\nservice0_op7('r1')").await?,
    );
    host.close().await?;
    println!(
        "importing a module of 50 tools costs {:.3} ms; importing one and calling it {:.3} ms",
        (imported.as_secs_f64() - base.as_secs_f64()) * 1e3,
        (called.as_secs_f64() - base.as_secs_f64()) * 1e3
    );
    Ok(())
}

/// The 50-line snippet run with and without type checking; the difference
/// is what checking costs.
async fn type_check_cost(
    client: &Client,
    cpus: f64,
    tools: &Toolset,
) -> Result<(), Box<dyn std::error::Error>> {
    const SNIPPET: &str = include_str!("snippet50.py");
    let mut p50 = Vec::new();
    for checked in [false, true] {
        let host = client.code_host(CodeHostConfig::new().cpus(cpus).type_check(checked));
        host.start().await?;
        for _ in 0..5 {
            host.execute(SNIPPET, Map::new(), tools).await?;
        }
        let mut times = Vec::with_capacity(40);
        for _ in 0..40 {
            let t = Instant::now();
            let run = host.execute(SNIPPET, Map::new(), tools).await?;
            times.push(t.elapsed());
            assert_eq!(run.value["orders"], json!(30));
        }
        host.close().await?;
        let name = if checked {
            "50-line snippet, type-checked"
        } else {
            "50-line snippet, unchecked"
        };
        p50.push(report(name, times));
    }
    println!(
        "type checking a 50-line snippet costs {:.2} ms (p50 difference; target <= 5 ms to be on by default)",
        (p50[1].as_secs_f64() - p50[0].as_secs_f64()) * 1e3
    );
    Ok(())
}

/// Fifty runs of a loop that sums 0..10,000.
async fn loop_times(
    host: &dockhand::codemode::CodeHost,
    code: &str,
    tools: &Toolset,
) -> Result<Vec<Duration>, Box<dyn std::error::Error>> {
    let mut times = Vec::with_capacity(50);
    for _ in 0..50 {
        let t = Instant::now();
        let run = host.execute(code, Map::new(), tools).await?;
        times.push(t.elapsed());
        assert_eq!(run.value, json!(49_995_000));
    }
    Ok(times)
}

const PLAIN_FEED: &str = "trivial, a feed on a held session";
const PLAIN_ITER: &str = "an iterator loop of 10,000";
const PLAIN_CALL: &str = "an external call's round trip";

/// Plain Monty's figures, measured by `plain_monty.py` with pydantic-monty
/// inside a container of the code host's image (with the package added),
/// under the same CPU limit and offline.
async fn plain_monty(
    client: &Client,
    cpus: f64,
) -> Result<Vec<(String, f64)>, Box<dyn std::error::Error>> {
    let image = dockhand::ImageSpec::default()
        .pip([dockhand::codemode::MONTY_PACKAGE])
        .trust_host_certificates();
    let host = client.code_host(CodeHostConfig::new().image(image));
    host.start().await?;
    let image = host.describe().image.ok_or("the code host has no image")?;
    host.close().await?;
    let out = tokio::process::Command::new("docker")
        .args(["run", "--rm", "--network", "none", "--cpus"])
        .arg(cpus.to_string())
        .args([
            image.as_str(),
            "python3",
            "-c",
            include_str!("plain_monty.py"),
        ])
        .output()
        .await?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
    }
    Ok(serde_json::from_slice(&out.stdout)?)
}
