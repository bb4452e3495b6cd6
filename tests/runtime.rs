//! Runtime controls with real containers: limits, timeout, retries, secrets,
//! network, hardening, the output cache and cleanup.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dockhand::{CacheMode, Error, Hardening, ImageSpec, Network, Sandbox, Secret, Type, Value};

/// Reads the container's CPU quota (cgroup v2 or v1) and, after the busy
/// loop has used 0.3 s of CPU, how often the kernel throttled it. The loop
/// ends on CPU used, not on wall time: on an oversubscribed host a busy loop
/// may never reach its quota within a wall-clock window, but 0.3 s of CPU
/// under a quota of 25 ms per 100 ms period cannot be had without being
/// throttled (the wall-clock bound only stops a loop that gets no CPU at all).
const CPU_PROBE: &str = "import time\n\
def read(*paths):\n    for p in paths:\n        try:\n            return open(p).read()\n        except OSError:\n            pass\n    return ''\n\
v2 = read('/sys/fs/cgroup/cpu.max').split()\n\
if v2:\n    quota, period = (-1 if v2[0] == 'max' else int(v2[0])), int(v2[1])\n\
else:\n    quota = int(read('/sys/fs/cgroup/cpu/cpu.cfs_quota_us', '/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us'))\n    period = int(read('/sys/fs/cgroup/cpu/cpu.cfs_period_us', '/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us'))\n\
t = time.time()\n\
while time.process_time() < 0.3 and time.time() - t < 120:\n    pass\n\
used = time.process_time()\n\
stat = dict(line.split() for line in read('/sys/fs/cgroup/cpu.stat', '/sys/fs/cgroup/cpu/cpu.stat', '/sys/fs/cgroup/cpu,cpuacct/cpu.stat').splitlines())\n\
cpus = quota / period\n\
throttled = int(stat.get('nr_throttled', 0))\n";

#[tokio::test]
async fn cpu_limit_throttles() {
    let client = common::client().await;
    let probe = |name: &str, cpus: f64| {
        let sb = Sandbox::code(name, CPU_PROBE)
            .output("cpus", Type::Float)
            .output("throttled", Type::Int)
            .output("used", Type::Float)
            .cpus(cpus)
            .cache(CacheMode::Disable)
            .build()
            .unwrap();
        let client = client.clone();
        async move {
            let out = client.run(&sb, dockhand::NO_INPUTS).await.unwrap();
            (
                out.get::<f64>("cpus").unwrap(),
                out.get::<i64>("throttled").unwrap(),
                out.get::<f64>("used").unwrap(),
            )
        }
    };
    let (quarter, throttled, used) = probe("cpu-quarter", 0.25).await;
    eprintln!(
        "0.25 cpus: quota {quarter} of a CPU, throttled {throttled} times using {used:.3} s of CPU"
    );
    assert_eq!(quarter, 0.25, "the container's CPU quota");
    assert!(used >= 0.3, "the loop got {used} s of CPU in two minutes");
    assert!(
        throttled > 0,
        "a busy loop that used {used} s of CPU under a quarter CPU is throttled"
    );
    let (one, _, _) = probe("cpu-one", 1.0).await;
    assert_eq!(one, 1.0);
}

#[tokio::test]
async fn memory_hog_is_oom_killed() {
    let client = common::client().await;
    let hog = Sandbox::code(
        "memory-hog",
        "import sys\nprint('loading', flush=True)\nprint('big step next', file=sys.stderr, flush=True)\nx = bytearray(400 * 1024 * 1024)\nprint(len(x))",
    )
    .verbatim()
    .memory("64Mi")
    .build()
    .unwrap();
    match client.run(&hog, dockhand::NO_INPUTS).await {
        Err(Error::OutOfMemory {
            limit_bytes,
            stdout_tail,
            stderr_tail,
        }) => {
            assert_eq!(limit_bytes, 64 << 20);
            // What it printed before it died is kept.
            assert_eq!(stdout_tail, "loading\n");
            assert_eq!(stderr_tail, "big step next\n");
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    common::assert_no_container("memory-hog");
}

#[tokio::test]
async fn fork_bomb_stays_within_the_pids_limit() {
    let client = common::client().await;
    let bomb = Sandbox::code(
        "fork-bomb",
        "import os, time\nforked = 0\nrefused = 0\nfor _ in range(200):\n    try:\n        pid = os.fork()\n    except OSError:\n        refused += 1\n        continue\n    if pid == 0:\n        time.sleep(2)\n        os._exit(0)\n    forked += 1\n",
    )
    .output("forked", Type::Int)
    .output("refused", Type::Int)
    .pids(32)
    .cache(CacheMode::Disable)
    .build()
    .unwrap();
    let started = Instant::now();
    let out = client.run(&bomb, dockhand::NO_INPUTS).await.unwrap();
    let (forked, refused): (i64, i64) = out.outputs.tuple().unwrap();
    assert!(forked < 32, "forked {forked} processes under a limit of 32");
    assert!(refused > 0);
    assert!(started.elapsed() < Duration::from_secs(30));
    common::assert_no_container("fork-bomb");
}

#[tokio::test]
async fn timeout_kills_and_keeps_output_seen_so_far() {
    let client = common::client().await;
    let sleeper = Sandbox::command("sleeper", "sh")
        .args(["-c", "echo started; sleep 60"])
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = client.run(&sleeper, dockhand::NO_INPUTS).await.unwrap_err();
    let elapsed = started.elapsed();
    match err {
        Error::Timeout {
            timeout, stdout, ..
        } => {
            assert_eq!(timeout, Duration::from_secs(2));
            assert_eq!(stdout, "started\n");
        }
        other => panic!("expected Timeout, got {other:?}"),
    }
    // Generous: the program sleeps 60 s.
    assert!(elapsed < Duration::from_secs(40), "took {elapsed:?}");
    common::assert_no_container("sleeper");
}

#[tokio::test]
async fn a_failed_attempt_is_retried_in_a_fresh_container() {
    let client = common::client().await;
    let flaky = Sandbox::code(
        "flaky",
        "import os\nif os.environ['DOCKHAND_ATTEMPT'] == '1':\n    raise RuntimeError('first attempt fails')\nattempt = int(os.environ['DOCKHAND_ATTEMPT'])\n",
    )
    .output("attempt", Type::Int)
    .retries(2)
    .cache(CacheMode::Disable)
    .build()
    .unwrap();
    let out = client.run(&flaky, dockhand::NO_INPUTS).await.unwrap();
    assert_eq!(out.get::<i64>("attempt").unwrap(), 2);
    assert_eq!(out.attempts.len(), 2);
    assert!(out.attempts[0]
        .error
        .as_deref()
        .unwrap()
        .contains("first attempt fails"));
    assert!(out.attempts[1].error.is_none());

    let hopeless = Sandbox::code("hopeless", "raise RuntimeError('always')")
        .retries(2)
        .build()
        .unwrap();
    match client.run(&hopeless, dockhand::NO_INPUTS).await {
        Err(Error::RetriesExhausted { attempts, last }) => {
            assert_eq!(attempts.len(), 3);
            assert!(matches!(*last, Error::NonZeroExit { .. }));
        }
        other => panic!("expected RetriesExhausted, got {other:?}"),
    }
    // Bad inputs are not retried.
    let typed = Sandbox::code("typed-retry", "y = x")
        .input("x", Type::Int)
        .retries(3)
        .build()
        .unwrap();
    assert!(matches!(
        client.run(&typed, [("x", "nope")]).await,
        Err(Error::InputType { .. })
    ));
    for name in ["flaky", "hopeless", "typed-retry"] {
        common::assert_no_container(name);
    }
}

/// Collects everything `tracing` prints while the test runs.
#[derive(Clone, Default)]
struct LogSink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn secrets_reach_the_code_and_nothing_else() {
    const VALUE: &str = "s3cr3t-9f8e7d";
    let sink = LogSink::default();
    let writer = sink.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    let _log = tracing::subscriber::set_default(subscriber);

    let client = common::client().await;
    // A host variable every process has: setting one here would race with
    // the other tests' threads reading the environment.
    let host_path = std::env::var("PATH").expect("PATH is set");
    let sb = Sandbox::code(
        "secrets",
        "import os\n\
         from_env = os.environ['API_KEY'][::-1] == 'REVERSED'\n\
         from_file = open('/run/secrets/DB_PASSWORD').read() == host_path\n\
         print('leaking', os.environ['API_KEY'])\n\
         if fail:\n    raise ValueError('bad key ' + os.environ['API_KEY'])\n"
            .replace("REVERSED", &VALUE.chars().rev().collect::<String>()),
    )
    .input("fail", Type::Bool)
    .input("host_path", Type::Str)
    .output("from_env", Type::Bool)
    .output("from_file", Type::Bool)
    .secret(Secret::value("API_KEY", VALUE))
    .secret(Secret::from_env("DB_PASSWORD", "PATH").as_file())
    .cache(CacheMode::Auto)
    .build()
    .unwrap();

    let args = |fail: bool| {
        [
            ("fail", Value::from(fail)),
            ("host_path", Value::from(host_path.as_str())),
        ]
    };
    let out = client.run(&sb, args(false)).await.unwrap();
    assert!(out.get::<bool>("from_env").unwrap());
    assert!(out.get::<bool>("from_file").unwrap());
    assert!(!out.cached);
    assert_eq!(out.stdout.text, "leaking [redacted:API_KEY]\n");
    // Runs with secrets are not cached unless asked.
    assert!(!client.run(&sb, args(false)).await.unwrap().cached);

    let err = client.run(&sb, args(true)).await.unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(shown.contains("[redacted:API_KEY]"), "{shown}");
    assert!(!shown.contains(VALUE), "{shown}");

    let debug = format!("{sb:?}");
    assert!(!debug.contains(VALUE), "{debug}");
    let json = serde_json::to_string(&sb).unwrap();
    assert!(!json.contains(VALUE), "{json}");
    let logs = String::from_utf8_lossy(&sink.0.lock().unwrap()).into_owned();
    assert!(!logs.is_empty(), "tracing captured nothing");
    assert!(!logs.contains(VALUE), "a secret reached the logs");
    // The image holds no trace of them: secrets only exist at run time.
    let history = std::process::Command::new("docker")
        .args(["history", "--no-trunc", &out.image])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&history.stdout).contains(VALUE));
    common::assert_no_container("secrets");
}

#[tokio::test]
async fn no_network_by_default_and_network_when_asked() {
    let client = common::client().await;
    // 192.0.2.1 is reserved for documentation: nothing listens there and, with
    // no network, no packet can even leave.
    let code = "import os, socket\n\
                interfaces = sorted(os.listdir('/sys/class/net'))\n\
                routes = len(open('/proc/net/route').read().splitlines()) - 1\n\
                s = socket.socket()\n\
                s.settimeout(0.5)\n\
                try:\n    s.connect(('192.0.2.1', 9))\n    error = ''\nexcept OSError as e:\n    error = type(e).__name__ + ' ' + str(e.errno)\n";
    let probe = |name: &str, network: Network| {
        Sandbox::code(name, code)
            .output("interfaces", Type::Json)
            .output("routes", Type::Int)
            .output("error", Type::Str)
            .network(network)
            .cache(CacheMode::Disable)
            .build()
            .unwrap()
    };
    let isolated = client
        .run(&probe("net-none", Network::None), dockhand::NO_INPUTS)
        .await
        .unwrap();
    assert_eq!(
        isolated.get::<serde_json::Value>("interfaces").unwrap(),
        serde_json::json!(["lo"])
    );
    assert_eq!(isolated.get::<i64>("routes").unwrap(), 0);
    let error: String = isolated.get("error").unwrap();
    assert!(
        error.contains("101"),
        "connect without network should fail with ENETUNREACH, got {error}"
    );

    let bridged = client
        .run(&probe("net-bridge", Network::Bridge), dockhand::NO_INPUTS)
        .await
        .unwrap();
    let interfaces = bridged.get::<serde_json::Value>("interfaces").unwrap();
    assert!(interfaces.as_array().unwrap().len() >= 2, "{interfaces}");
    assert!(bridged.get::<i64>("routes").unwrap() >= 1);
}

#[tokio::test]
async fn hardened_by_default_and_relaxable() {
    let client = common::client().await;
    let code = "import os\n\
                uid = os.getuid()\n\
                caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0]\n\
                def can_write(path):\n    try:\n        open(path, 'w').write('x')\n        return True\n    except OSError:\n        return False\n\
                etc = can_write('/etc/dockhand-probe')\n\
                tmp = can_write('/tmp/probe')\n\
                out = can_write('/var/outputs/probe')\n";
    let probe = |name: &str, hardening: Hardening| {
        Sandbox::code(name, code)
            .output("uid", Type::Int)
            .output("caps", Type::Str)
            .output("etc", Type::Bool)
            .output("tmp", Type::Bool)
            .output("out", Type::Bool)
            .hardening(hardening)
            .cache(CacheMode::Disable)
            .build()
            .unwrap()
    };
    let out = client
        .run(
            &probe("hardened", Hardening::default()),
            dockhand::NO_INPUTS,
        )
        .await
        .unwrap();
    assert_eq!(out.get::<i64>("uid").unwrap(), 65534);
    assert_eq!(out.get::<String>("caps").unwrap(), "0000000000000000");
    assert!(
        !out.get::<bool>("etc").unwrap(),
        "wrote to /etc under a read-only root"
    );
    assert!(out.get::<bool>("tmp").unwrap());
    assert!(out.get::<bool>("out").unwrap());

    let out = client
        .run(&probe("relaxed", Hardening::relaxed()), dockhand::NO_INPUTS)
        .await
        .unwrap();
    assert_eq!(out.get::<i64>("uid").unwrap(), 0);
    assert!(out.get::<bool>("etc").unwrap());
    assert_ne!(out.get::<String>("caps").unwrap(), "0000000000000000");
}

#[tokio::test]
async fn output_cache_hits_and_misses() {
    let client = common::client().await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data.txt");
    std::fs::write(&data, "one").unwrap();
    let job = |code: &str, image: ImageSpec| {
        Sandbox::code("cached", code)
            .input("x", Type::Int)
            .input("data", Type::File)
            .output("token", Type::Str)
            .output("copy", Type::File)
            .image(image)
            .cache(CacheMode::Auto)
            .build()
            .unwrap()
    };
    let code =
        "import uuid, shutil\ntoken = uuid.uuid4().hex\nshutil.copy(data, '/var/outputs/copy')\n";
    let sb = job(code, ImageSpec::default());
    let run = |sb: Sandbox, x: i64| {
        let client = client.clone();
        let data = data.clone();
        async move {
            client
                .run(&sb, [("x", Value::from(x)), ("data", Value::file(&data))])
                .await
                .unwrap()
        }
    };
    let first = run(sb.clone(), 1).await;
    assert!(!first.cached);
    let token: String = first.get("token").unwrap();

    let hit = run(sb.clone(), 1).await;
    assert!(hit.cached, "identical run should hit");
    assert!(hit.attempts.is_empty(), "a hit starts no container");
    assert_eq!(hit.get::<String>("token").unwrap(), token);
    let copy: std::path::PathBuf = hit.get("copy").unwrap();
    assert_eq!(std::fs::read_to_string(copy).unwrap(), "one");

    let changed_code = run(job(&format!("{code}# changed\n"), ImageSpec::default()), 1).await;
    assert!(!changed_code.cached);
    let changed_input = run(sb.clone(), 2).await;
    assert!(!changed_input.cached);
    std::fs::write(&data, "two").unwrap();
    let changed_file = run(sb.clone(), 1).await;
    assert!(!changed_file.cached);
    assert_ne!(changed_file.get::<String>("token").unwrap(), token);
    std::fs::write(&data, "one").unwrap();
    let changed_image = run(job(code, ImageSpec::default().run("echo other-image")), 1).await;
    assert!(!changed_image.cached);
    // Back to the original: still cached.
    assert!(run(sb.clone(), 1).await.cached);

    // Override runs and replaces the stored entry.
    let override_sb = Sandbox::code("cached", code)
        .input("x", Type::Int)
        .input("data", Type::File)
        .output("token", Type::Str)
        .output("copy", Type::File)
        .cache(CacheMode::Override)
        .build()
        .unwrap();
    let fresh = client
        .run(
            &override_sb,
            [("x", Value::from(1)), ("data", Value::file(&data))],
        )
        .await
        .unwrap();
    assert!(!fresh.cached);
    let after = run(sb.clone(), 1).await;
    assert!(after.cached);
    assert_eq!(
        after.get::<String>("token").unwrap(),
        fresh.get::<String>("token").unwrap()
    );
    // Failed runs are never cached.
    let failing = Sandbox::code("cached-fail", "raise SystemExit(3)")
        .build()
        .unwrap();
    assert!(client.run(&failing, dockhand::NO_INPUTS).await.is_err());
    assert!(client.run(&failing, dockhand::NO_INPUTS).await.is_err());
    let _ = std::process::Command::new("docker")
        .args(["rmi", "-f", &changed_image.image])
        .output();
}

#[tokio::test]
async fn a_dropped_run_leaves_no_container() {
    let client = common::client().await;
    let slow = Sandbox::command("dropped", "sleep")
        .args(["30"])
        .build()
        .unwrap();
    let run = client.run(&slow, dockhand::NO_INPUTS);
    // Let it get as far as a running container, then drop it.
    assert!(tokio::time::timeout(Duration::from_secs(3), run)
        .await
        .is_err());
    let deadline = Instant::now() + Duration::from_secs(2);
    while common::containers_with_label("dev.dockhand.sandbox=dropped") > 0 {
        assert!(
            Instant::now() < deadline,
            "container still there 2 s after the drop"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_panic_mid_run_leaves_no_container() {
    let client = common::client().await;
    let slow = Sandbox::command("panicked", "sleep")
        .args(["30"])
        .build()
        .unwrap();
    let task = tokio::spawn(async move {
        tokio::select! {
            _ = client.run(&slow, dockhand::NO_INPUTS) => {}
            _ = tokio::time::sleep(Duration::from_secs(3)) => panic!("boom in the middle of a run"),
        }
    });
    assert!(task.await.unwrap_err().is_panic());
    common::assert_no_container("panicked");
}

#[tokio::test]
async fn reap_removes_what_dead_processes_left() {
    let client = common::client().await;
    let image = client
        .resolve_image(&ImageSpec::default())
        .await
        .unwrap()
        .reference;
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let out = std::process::Command::new("docker")
        .args([
            "create",
            "--label",
            "dev.dockhand.managed=true",
            "--label",
            "dev.dockhand.session=dead-session",
            "--label",
            &format!("dev.dockhand.owner-host={}", host.trim()),
            "--label",
            "dev.dockhand.owner-pid=99999999",
            "--label",
            "dev.dockhand.sandbox=orphan",
            &image,
            "true",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let orphan = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let report = client.reap().await.unwrap();
    assert!(report.containers.contains(&orphan), "{report:?}");
    common::assert_no_container("orphan");
}
