//! Warm pools against the real daemon: pooled runs match cold ones, no
//! container serves twice, sizes hold, and nothing is left behind.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use dockhand::pool::PoolConfig;
use dockhand::session::{SessionApi, SessionConfig};
use dockhand::{CacheMode, Client, ImageSpec, Sandbox, Type, Value};

const FILL: Duration = Duration::from_secs(60);

fn pool_containers(name: &str) -> usize {
    common::containers_with_label(&format!("dev.dockhand.pool={name}"))
}

/// Waits up to 10 s for no container to carry `label` (removal after a run
/// or a close finishes in the background).
async fn none_left(label: &str) {
    for _ in 0..50 {
        if common::containers_with_label(label) == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("containers labelled `{label}` were left behind");
}

async fn gone(name: &str) {
    none_left(&format!("dev.dockhand.pool={name}")).await;
}

/// One sandbox per mode; each prints, writes outputs and reports what it saw.
fn sandboxes() -> Vec<Sandbox> {
    let auto = Sandbox::code(
        "pool-auto",
        "import os, sys\nprint('hi', x)\ny = x * 2\nattempt = int(os.environ['DOCKHAND_ATTEMPT'])\nstdin = sys.stdin.read()\nhost = os.environ['HOSTNAME']",
    )
    .input("x", Type::Int)
    .output("y", Type::Int)
    .output("attempt", Type::Int)
    .output("stdin", Type::Str)
    .output("host", Type::Str)
    .cache(CacheMode::Disable)
    .build()
    .unwrap();
    let verbatim = Sandbox::code(
        "pool-verbatim",
        "import os\nx = int(open('/var/inputs/x').read())\nopen('/var/outputs/y', 'w').write(str(x * 2))\nopen('/var/outputs/host', 'w').write(os.environ['HOSTNAME'])\nprint('verbatim', x)",
    )
    .verbatim()
    .input("x", Type::Int)
    .output("y", Type::Int)
    .output("host", Type::Str)
    .cache(CacheMode::Disable)
    .build()
    .unwrap();
    let command = Sandbox::command("pool-command", "sh")
        .args([
            "-c",
            "echo \"$1 it's\"; echo $((2 * $1)) > /var/outputs/y; echo -n $HOSTNAME > /var/outputs/host; exit 3",
            "sh",
            "{{x}}",
        ])
        .input("x", Type::Int)
        .output("y", Type::Int)
        .output("host", Type::Str)
        .accept_exit_codes([3])
        .cache(CacheMode::Disable)
        .build()
        .unwrap();
    vec![auto, verbatim, command]
}

/// Auto-IO code whose job cannot travel inline (a File input: uploaded,
/// then the started interpreter hands over to the uploaded command), and
/// code that fails: the same outcome warm as cold, traceback included.
#[tokio::test]
async fn pooled_uploads_and_failures_match_cold_runs() {
    let client = common::client().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data.txt");
    std::fs::write(&file, "shout\n").unwrap();
    let upload = Sandbox::code(
        "pool-upload",
        "import os, sys\ntext = open(data).read().upper()\nattempt = os.environ['DOCKHAND_ATTEMPT']\nstdin = sys.stdin.read()\nprint('read', len(text))",
    )
    .input("data", Type::File)
    .output("text", Type::Str)
    .output("attempt", Type::Str)
    .output("stdin", Type::Str)
    .cache(CacheMode::Disable)
    .build()
    .unwrap();
    let failing = Sandbox::code(
        "pool-failing",
        "import sys\nprint('before')\nsys.stderr.write('warned\\n')\n\ndef f(v):\n    return 1 / v\n\ny = f(x)\n",
    )
    .input("x", Type::Int)
    .output("y", Type::Float)
    .cache(CacheMode::Disable)
    .build()
    .unwrap();
    let inputs = || [("data", Value::File(file.clone()))];
    let cold = client.run(&upload, inputs()).await.unwrap();
    let pool = client.pool(&upload, PoolConfig::new(1)).await.unwrap();
    assert!(pool.wait_ready(FILL).await, "{:?}", pool.stats());
    let warm = pool.run(inputs()).await.unwrap();
    assert_eq!(pool.stats().handed_over, 1, "{:?}", pool.stats());
    for out in [&cold, &warm] {
        assert_eq!(out.get::<String>("text").unwrap(), "SHOUT\n");
        assert_eq!(out.get::<String>("attempt").unwrap(), "1");
        assert_eq!(out.get::<String>("stdin").unwrap(), "");
        assert_eq!(out.stdout.text, "read 6\n");
    }
    pool.shutdown().await;
    gone("pool-upload").await;

    let cold = client.run(&failing, [("x", 0)]).await.unwrap_err();
    let pool = client.pool(&failing, PoolConfig::new(1)).await.unwrap();
    assert!(pool.wait_ready(FILL).await, "{:?}", pool.stats());
    let warm = pool.run([("x", 0)]).await.unwrap_err();
    assert_eq!(pool.stats().handed_over, 1, "{:?}", pool.stats());
    let python = |e: &dockhand::Error| match e {
        dockhand::Error::NonZeroExit {
            exit_code,
            python,
            stdout_tail,
            ..
        } => (
            *exit_code,
            python.clone().expect("a Python error"),
            stdout_tail.clone(),
        ),
        other => panic!("expected NonZeroExit, got {other:?}"),
    };
    let (cold, warm) = (python(&cold), python(&warm));
    assert_eq!(cold, warm);
    assert_eq!(cold.1.exception_type, "ZeroDivisionError");
    assert!(cold.1.traceback.contains("line 8"), "{}", cold.1.traceback);
    assert!(
        cold.1.traceback.contains("return 1 / v"),
        "{}",
        cold.1.traceback
    );
    assert!(
        !cold.1.traceback.contains("dockhand"),
        "{}",
        cold.1.traceback
    );
    assert_eq!(cold.2, "before\n");
    pool.shutdown().await;
    gone("pool-failing").await;
}

#[tokio::test]
async fn pooled_runs_match_cold_runs_in_every_mode() {
    let client = common::client().await;
    for sandbox in sandboxes() {
        let cold = client.run(&sandbox, [("x", 21)]).await.unwrap();
        let pool = client.pool(&sandbox, PoolConfig::new(2)).await.unwrap();
        assert!(pool.wait_ready(FILL).await, "{:?}", pool.stats());
        let warm = pool.run([("x", 21)]).await.unwrap();
        assert_eq!(pool.stats().handed_over, 1, "{:?}", pool.stats());
        assert_eq!(warm.get::<i64>("y").unwrap(), 42, "{}", sandbox.name());
        assert_eq!(
            (
                warm.exit_code,
                warm.stdout.text.as_str(),
                warm.stderr.text.as_str()
            ),
            (
                cold.exit_code,
                cold.stdout.text.as_str(),
                cold.stderr.text.as_str()
            ),
            "{}",
            sandbox.name()
        );
        if sandbox.name() == "pool-auto" {
            for out in [&cold, &warm] {
                assert_eq!(out.get::<i64>("attempt").unwrap(), 1);
                assert_eq!(out.get::<String>("stdin").unwrap(), "", "stdin is empty");
            }
        }
        assert_ne!(
            warm.get::<String>("host").unwrap(),
            cold.get::<String>("host").unwrap()
        );
        pool.shutdown().await;
        gone(sandbox.name()).await;
    }
}

#[tokio::test]
async fn no_container_serves_twice_and_the_size_holds() {
    let client = common::client().await;
    let sandbox = Sandbox::code(
        "pool-once",
        "import os\nhost = os.environ['HOSTNAME']\nprint(x)",
    )
    .input("x", Type::Int)
    .output("host", Type::Str)
    .cache(CacheMode::Disable)
    .build()
    .unwrap();
    let pool = client.pool(&sandbox, PoolConfig::new(3)).await.unwrap();
    assert!(pool.wait_ready(FILL).await);
    assert_eq!(pool_containers("pool-once"), 3);
    let mut hosts = HashSet::new();
    let runs = (0..12).map(|i| pool.run([("x", Value::from(i))]));
    let watch = async {
        // While runs go, the pool never holds or makes more than its size.
        for _ in 0..40 {
            let s = pool.stats();
            assert!(s.ready + s.starting <= 3, "{s:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let (outs, ()) = tokio::join!(futures::future::join_all(runs), watch);
    for (i, out) in outs.into_iter().enumerate() {
        let out = out.unwrap();
        assert_eq!(out.stdout.text, format!("{i}\n"));
        assert!(
            hosts.insert(out.get::<String>("host").unwrap()),
            "a container ran twice"
        );
    }
    let stats = pool.stats();
    assert_eq!(stats.handed_over + stats.misses, 12, "{stats:?}");
    assert!(stats.handed_over >= 3, "{stats:?}");
    drop(pool);
    gone("pool-once").await;
}

#[tokio::test]
async fn a_failing_refill_is_reported_and_retried() {
    let client = common::client().await;
    let base = client.resolve_image(&ImageSpec::default()).await.unwrap();
    let tag = "dockhand-test/pool-refill:gone";
    common::docker(&["tag", &base.reference, tag]);
    let sandbox = Sandbox::command("pool-refill", "echo")
        .args(["ok"])
        .image(ImageSpec::prebuilt(tag))
        .cache(CacheMode::Disable)
        .build()
        .unwrap();
    let pool = client.pool(&sandbox, PoolConfig::new(1)).await.unwrap();
    assert!(pool.wait_ready(FILL).await);
    // The image goes: the warm container still runs, its replacement cannot be made.
    common::docker(&["rmi", tag]);
    assert_eq!(
        pool.run(dockhand::NO_INPUTS).await.unwrap().stdout.text,
        "ok\n"
    );
    let mut stats = pool.stats();
    for _ in 0..50 {
        if stats.fill_failures > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        stats = pool.stats();
    }
    assert!(stats.fill_failures > 0, "{stats:?}");
    assert!(stats.last_failure.is_some(), "{stats:?}");
    assert_eq!(stats.ready, 0);
    // The image comes back: the pool refills on its next try.
    common::docker(&["tag", &base.reference, tag]);
    assert!(pool.wait_ready(FILL).await, "{:?}", pool.stats());
    assert_eq!(
        pool.run(dockhand::NO_INPUTS).await.unwrap().stdout.text,
        "ok\n"
    );
    pool.shutdown().await;
    gone("pool-refill").await;
    common::docker(&["rmi", tag]);
}

#[tokio::test]
async fn sessions_and_code_hosts_come_started_from_pools() {
    let client = common::client().await;
    let sessions = client
        .session_pool(
            SessionConfig::new().name("pooled-session"),
            PoolConfig::new(2),
        )
        .await
        .unwrap();
    assert!(sessions.wait_ready(FILL).await, "{:?}", sessions.stats());
    let a = sessions.session().await.unwrap();
    let b = sessions.session().await.unwrap();
    assert_eq!(a.state(), dockhand::State::Idle);
    let (ida, idb) = (a.describe().container_id, b.describe().container_id);
    assert!(ida.is_some() && ida != idb, "two takes, two containers");
    assert_eq!(a.exec("echo hi").await.unwrap().stdout, "hi\n");
    a.close().await.unwrap();
    b.close().await.unwrap();
    assert_eq!(sessions.stats().handed_over, 2);
    sessions.shutdown().await;
    none_left("dev.dockhand.session-name=pooled-session").await;

    let hosts = client
        .code_host_pool(
            dockhand::codemode::CodeHostConfig::new(),
            PoolConfig::new(1),
        )
        .await
        .unwrap();
    assert!(hosts.wait_ready(FILL).await, "{:?}", hosts.stats());
    let host = hosts.host().await.unwrap();
    let id = host.describe().container_id.unwrap();
    let run = host
        .execute(
            "1 + 1",
            serde_json::json!({}),
            &dockhand::codemode::Toolset::new(),
        )
        .await
        .unwrap();
    assert_eq!(run.value, serde_json::json!(2));
    host.close().await.unwrap();
    hosts.shutdown().await;
    common::wait_gone(&id).await;
}

/// A pool dropped while it is still filling leaves nothing once its fills land.
#[tokio::test]
async fn a_pool_dropped_while_filling_leaves_nothing() {
    let client: Client = common::client().await;
    let sandbox = Sandbox::command("pool-dropped", "true").build().unwrap();
    let pool = client.pool(&sandbox, PoolConfig::new(3)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    drop(pool);
    tokio::time::sleep(Duration::from_secs(2)).await;
    gone("pool-dropped").await;
}

/// Waits up to 10 s for exactly `n` containers labelled for pool `name`.
async fn settles_at(name: &str, n: usize) {
    for _ in 0..50 {
        if pool_containers(name) == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!(
        "pool `{name}` holds {} containers, not {n}",
        pool_containers(name)
    );
}

/// Pooled runs that are dropped, stop themselves or kill their own
/// interpreter end typed and take their container with them; the next
/// pooled run gets a fresh one and its own result.
#[tokio::test]
async fn hostile_and_dropped_pooled_runs_leave_nothing() {
    let client = common::client().await;
    let sandbox = Sandbox::code(
        "pool-hostile",
        "import os, signal, time\n\
         if mode == 'sleep':\n    time.sleep(60)\n\
         elif mode == 'stop':\n    os.kill(os.getpid(), signal.SIGSTOP)\n\
         elif mode == 'kill':\n    os.kill(os.getpid(), signal.SIGKILL)\n\
         elif mode == 'parent':\n    os.kill(os.getppid(), signal.SIGKILL)\n    time.sleep(60)\n\
         host = os.environ['HOSTNAME']\n",
    )
    .input("mode", Type::Str)
    .output("host", Type::Str)
    .cache(CacheMode::Disable)
    .timeout(Duration::from_secs(4))
    .build()
    .unwrap();
    let pool = client.pool(&sandbox, PoolConfig::new(1)).await.unwrap();
    let mut hosts = HashSet::new();
    let fresh_run = async |hosts: &mut HashSet<String>| {
        assert!(pool.wait_ready(FILL).await, "{:?}", pool.stats());
        let out = pool.run([("mode", "ok")]).await.expect("a fresh run");
        assert!(hosts.insert(out.get::<String>("host").unwrap()), "reused");
        settles_at("pool-hostile", 1).await;
    };
    fresh_run(&mut hosts).await;

    // Dropped mid-run: the guard removes the container.
    assert!(pool.wait_ready(FILL).await);
    let dropped = tokio::time::timeout(Duration::from_millis(700), pool.run([("mode", "sleep")]));
    assert!(dropped.await.is_err(), "the sleeping run finished");
    settles_at("pool-hostile", 1).await;
    fresh_run(&mut hosts).await;

    // Stopped: the host-side deadline answers.
    let started = std::time::Instant::now();
    let stopped = pool.run([("mode", "stop")]).await.unwrap_err();
    assert!(
        matches!(stopped, dockhand::Error::Timeout { .. }),
        "{stopped:?}"
    );
    // Generous: a stopped container would otherwise never answer.
    assert!(started.elapsed() < Duration::from_secs(30));
    settles_at("pool-hostile", 1).await;
    fresh_run(&mut hosts).await;

    // Killed by its own hand, or its parent (the container's init) killed:
    // a typed end either way.
    let killed = pool.run([("mode", "kill")]).await.unwrap_err();
    assert!(
        matches!(killed, dockhand::Error::Killed { signal: 9, .. }),
        "{killed:?}"
    );
    settles_at("pool-hostile", 1).await;
    fresh_run(&mut hosts).await;
    let orphaned = pool.run([("mode", "parent")]).await.unwrap_err();
    assert!(
        matches!(
            orphaned,
            dockhand::Error::Killed { .. } | dockhand::Error::Timeout { .. }
        ),
        "{orphaned:?}"
    );
    settles_at("pool-hostile", 1).await;
    fresh_run(&mut hosts).await;
    assert_eq!(hosts.len(), 5);
    pool.shutdown().await;
    gone("pool-hostile").await;
}
