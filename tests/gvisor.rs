//! Everything under gVisor, on a second dockerd of the test's own with
//! `runsc` registered (the main daemon is left as it is). Needs `runsc`
//! (`apt-get install runsc`; `.ci/run` installs it). Without it the test says
//! it was skipped, except under CI, where that is a failure.
//!
//! The whole test runs under one deadline: Debian's runsc (2022-12) has been
//! seen to hang in `runsc start` here, and the SDK's own deadlines plus the
//! fixture's teardown (which kills whatever names its folder) must turn that
//! into a failure, never a wedged CI.

mod common;
#[path = "common/second_daemon.rs"]
mod second_daemon;

use std::time::Duration;

use dockhand::codemode::{CodeHostConfig, Toolset};
use dockhand::pool::PoolConfig;
use dockhand::session::{Edit, SessionApi, SessionConfig};
use dockhand::{CacheMode, Client, Error, ImageSpec, Isolation, Network, Sandbox, Type, Value};
use second_daemon::SecondDaemon;

const RUNSC: &str =
    r#"{"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--network=none"]}}}"#;

fn gvisor(name: &str, code: &str) -> dockhand::SandboxBuilder {
    Sandbox::code(name, code)
        .isolation(Isolation::Gvisor)
        .cache(CacheMode::Disable)
}

/// The most the whole test may take (about 75 s here).
const TEST_LIMIT: Duration = Duration::from_secs(420);

#[test]
fn everything_runs_under_gvisor_or_fails_clearly() {
    if !second_daemon::runsc_installed() {
        return;
    }
    // One long flow through every part of the SDK: in a debug build its
    // polls nest deeper than a test thread's 2 MiB allow, so it runs as a
    // task on workers with room.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_stack_size(8 << 20)
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        // Dropping the body on timeout drops the second daemon, which tears it down.
        tokio::spawn(tokio::time::timeout(TEST_LIMIT, everything()))
            .await
            .expect("the gVisor test's task")
            .unwrap_or_else(|_| panic!("the gVisor test did not finish within {TEST_LIMIT:?}"));
    });
}

async fn everything() {
    let main = common::client().await;
    let base = main.resolve_image(&ImageSpec::default()).await.unwrap();
    let daemon = SecondDaemon::start(RUNSC, &base.reference);
    // The code host's image (the bridge and Monty's worker copied in) is made
    // here, where the package indexes answer, and loaded there.
    let made = main.code_host(CodeHostConfig::new());
    made.start().await.unwrap();
    daemon.load(&made.describe().image.unwrap());
    made.close().await.unwrap();
    let kernel_image = main
        .resolve_image(&common::kernel_config().container_image())
        .await
        .unwrap();
    daemon.load(&kernel_image.reference);
    let client = Client::builder()
        .endpoint(&daemon.endpoint)
        .cache_dir(std::env::temp_dir().join(format!("dh-gvisor-cache-{}", std::process::id())))
        .connect()
        .await
        .unwrap();
    assert!(client
        .daemon_info()
        .await
        .unwrap()
        .runtimes
        .contains(&"runsc".to_string()));

    // A Jupyter kernel under gVisor: state, a chart, an interrupt that keeps state.
    let kernel = client.kernel(common::kernel_config().session(|s| s.isolation(Isolation::Gvisor)));
    kernel.start().await.unwrap();
    let ex = kernel
        .run("import os\nx = 1\nplt.plot([1, 2])\nos.uname().release")
        .await
        .unwrap();
    assert_eq!(ex.text(), Some("'4.4.0'"), "{ex:?}");
    assert_eq!(ex.pngs().len(), 1);
    let err = kernel
        .run_with(
            "while True: pass",
            dockhand::kernel::RunOptions::new().timeout(Duration::from_secs(1)),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Kernel(dockhand::kernel::KernelError::Timeout {
                state_lost: false,
                ..
            })
        ),
        "{err:?}"
    );
    assert_eq!(kernel.run("x").await.unwrap().text(), Some("1"));
    kernel.close().await.unwrap();

    // Auto-IO: the code sees gVisor's kernel; typed inputs and outputs work.
    let auto = gvisor(
        "g-auto",
        "import os\nrelease = os.uname().release\ny = x * 2",
    )
    .input("x", Type::Int)
    .output("y", Type::Int)
    .output("release", Type::Str)
    .build()
    .unwrap();
    let out = client.run(&auto, [("x", 21)]).await.unwrap();
    assert_eq!(out.get::<i64>("y").unwrap(), 42);
    assert_eq!(
        out.get::<String>("release").unwrap(),
        "4.4.0",
        "gVisor's kernel"
    );

    // Verbatim with File and Dir inputs and outputs.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "abc").unwrap();
    let verbatim = gvisor(
        "g-verbatim",
        "import os, shutil\ntext = open('/var/inputs/f').read()\nopen('/var/outputs/up', 'w').write(text.upper())\nshutil.copytree('/var/inputs/d', '/var/outputs/tree')",
    )
    .verbatim()
    .input("f", Type::File)
    .input("d", Type::Dir)
    .output("up", Type::File)
    .output("tree", Type::Dir)
    .build()
    .unwrap();
    let file = dir.path().join("a.txt");
    let out = client
        .run(
            &verbatim,
            [("f", Value::file(&file)), ("d", Value::dir(dir.path()))],
        )
        .await
        .unwrap();
    let up: std::path::PathBuf = out.get("up").unwrap();
    assert_eq!(std::fs::read_to_string(up).unwrap(), "ABC");
    let tree: std::path::PathBuf = out.get("tree").unwrap();
    assert_eq!(std::fs::read_to_string(tree.join("a.txt")).unwrap(), "abc");

    // Command mode with an argument from an input.
    let command = Sandbox::command("g-command", "sh")
        .args(["-c", "echo hello $0", "{{who}}"])
        .input("who", Type::Str)
        .isolation(Isolation::Gvisor)
        .cache(CacheMode::Disable)
        .build()
        .unwrap();
    let out = client.run(&command, [("who", "gvisor")]).await.unwrap();
    assert_eq!(out.stdout.text, "hello gvisor\n");

    // Limits hold: time, memory, processes; a signal death is reported as such.
    let slow = gvisor("g-slow", "import time\ntime.sleep(30)")
        .timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    assert!(matches!(
        client.run(&slow, dockhand::NO_INPUTS).await,
        Err(Error::Timeout { .. })
    ));
    let hungry = gvisor("g-hungry", "x = bytearray(300 * 1024 * 1024)")
        .memory("64Mi")
        .build()
        .unwrap();
    // When runsc removes the sandbox's cgroup before containerd reads its
    // OOM notice (about one run in twenty here), the daemon never learns of
    // the OOM and the run is a SIGKILL to it: a kill, never anything else,
    // and one of three runs shows the OOM.
    let mut out_of_memory = false;
    for _ in 0..3 {
        match client.run(&hungry, dockhand::NO_INPUTS).await {
            Err(Error::OutOfMemory { .. }) => {
                out_of_memory = true;
                break;
            }
            Err(Error::Killed { signal: 9, .. }) => {}
            other => panic!("expected OutOfMemory, got {other:?}"),
        }
    }
    assert!(
        out_of_memory,
        "none of three runs was reported out of memory"
    );
    // gVisor's own threads count toward the pids limit: a low one is refused, not hung.
    let few = gvisor("g-few", "print(1)").pids(32).build().unwrap();
    match client.run(&few, dockhand::NO_INPUTS).await {
        Err(e @ Error::InvalidSpec { .. }) => assert!(e.to_string().contains("gVisor"), "{e}"),
        other => panic!("expected a clear refusal, got {other:?}"),
    }
    let killed = gvisor("g-killed", "import os\nos.kill(os.getpid(), 9)")
        .build()
        .unwrap();
    assert!(matches!(
        client.run(&killed, dockhand::NO_INPUTS).await,
        Err(Error::Killed { signal: 9, .. })
    ));

    // Network: off works; on fails clearly, since runsc is registered offline here.
    let online = gvisor("g-online", "print(1)")
        .network(Network::Bridge)
        .build()
        .unwrap();
    match client.run(&online, dockhand::NO_INPUTS).await {
        Err(e @ Error::InvalidSpec { .. }) => {
            assert!(e.to_string().contains("--network=none"), "{e}")
        }
        other => panic!("expected a clear refusal, got {other:?}"),
    }

    // A pool under gVisor.
    let pool = client.pool(&auto, PoolConfig::new(1)).await.unwrap();
    assert!(
        pool.wait_ready(Duration::from_secs(60)).await,
        "{:?}",
        pool.stats()
    );
    let out = pool.run([("x", 4)]).await.unwrap();
    assert_eq!(out.get::<i64>("y").unwrap(), 8);
    pool.shutdown().await;

    hostile_cases(&client).await;

    // A session: exec, files, edits, snapshot.
    let session = client.session(SessionConfig::new().isolation(Isolation::Gvisor));
    session.start().await.unwrap();
    assert_eq!(session.exec("uname -r").await.unwrap().stdout, "4.4.0\n");
    session.write_file("a.py", b"print(1)\n").await.unwrap();
    session
        .edit_file("a.py", &[Edit::replace("print(1)", "print(2)")])
        .await
        .unwrap();
    assert_eq!(session.exec("python3 a.py").await.unwrap().stdout, "2\n");
    let snapshot = session.snapshot().await.unwrap();
    session.close().await.unwrap();
    client.remove_snapshot(&snapshot).await.unwrap();

    // Code mode.
    let host = client.code_host(CodeHostConfig::new().isolation(Isolation::Gvisor));
    host.start().await.unwrap();
    let run = host
        .execute("x * 3", serde_json::json!({"x": 14}), &Toolset::new())
        .await
        .unwrap();
    assert_eq!(run.value, serde_json::json!(42));
    host.close().await.unwrap();

    // Nothing of the SDK's is left on the second daemon but its own watchdog.
    for _ in 0..50 {
        let left = daemon.containers_with_label("dev.dockhand.managed")
            - daemon.containers_with_label("dev.dockhand.kind=watchdog");
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        daemon.containers_with_label("dev.dockhand.managed")
            - daemon.containers_with_label("dev.dockhand.kind=watchdog"),
        0
    );
}

/// The hostile cases that matter most under a second kernel: fork and memory
/// bombs, device files, /proc and /sys. Each ends typed, leaves no container,
/// and the next run still returns its own result.
async fn hostile_cases(client: &Client) {
    let fork_bomb = Sandbox::command("g-fork-bomb", "sh")
        .args(["-c", "f() { f | f & }; f; sleep 30"])
        .isolation(Isolation::Gvisor)
        .cache(CacheMode::Disable)
        .pids(128)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let started = std::time::Instant::now();
    let result = client.run(&fork_bomb, dockhand::NO_INPUTS).await;
    assert!(
        matches!(
            result,
            Err(Error::Timeout { .. } | Error::NonZeroExit { .. } | Error::Killed { .. })
        ),
        "{result:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );

    // Catches MemoryError and keeps allocating: the limit still ends it.
    let hog = gvisor(
        "g-hog",
        "hog = []\nwhile True:\n    try:\n        hog.append(bytearray(8 << 20))\n    except BaseException:\n        pass",
    )
    .memory("64Mi")
    .timeout(Duration::from_secs(30))
    .build()
    .unwrap();
    match client.run(&hog, dockhand::NO_INPUTS).await {
        Err(Error::OutOfMemory { .. }) => {}
        other => panic!("expected OutOfMemory, got {other:?}"),
    }

    // Devices, the kernel's memory and log, and kernel settings stay closed;
    // /proc describes gVisor's kernel, not the host's.
    let attempts = [
        // gVisor lets mknod make the node in its own file system (runc
        // refuses it outright); what matters is that it leads nowhere.
        (
            "mknod-read",
            "os.mknod('/tmp/mem', stat.S_IFCHR | 0o600, os.makedev(1, 1)); open('/tmp/mem', 'rb').read(1)",
        ),
        ("dev-mem", "open('/dev/mem', 'rb').read(1)"),
        ("kmsg", "open('/dev/kmsg', 'rb').read(1)"),
        ("kcore", "open('/proc/kcore', 'rb').read(1)"),
        (
            "disk",
            "open('/dev/' + sorted(os.listdir('/sys/block'))[0], 'rb').read(1)",
        ),
        (
            "sysctl",
            "open('/proc/sys/kernel/hostname', 'w').write('evil')",
        ),
        ("sysrq", "open('/proc/sysrq-trigger', 'w').write('b')"),
    ];
    let mut source = String::from("import os, stat\n");
    for (label, statement) in attempts {
        source.push_str(&format!(
            "try:\n    {statement}\n    print('{label} allowed')\nexcept Exception:\n    print('{label} denied')\n"
        ));
    }
    source.push_str("print('version', open('/proc/version').read().split()[2])\n");
    let probe = gvisor("g-probe", &source).build().unwrap();
    let text = client
        .run(&probe, dockhand::NO_INPUTS)
        .await
        .unwrap()
        .stdout
        .text;
    let mut lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.pop(), Some("version 4.4.0"), "{text}");
    assert_eq!(lines.len(), attempts.len(), "{text}");
    assert!(lines.iter().all(|l| l.ends_with(" denied")), "{text}");

    // The next run is unaffected.
    let double = gvisor("g-next", "y = x * 2")
        .input("x", Type::Int)
        .output("y", Type::Int)
        .build()
        .unwrap();
    let out = client.run(&double, [("x", 21)]).await.unwrap();
    assert_eq!(out.get::<i64>("y").unwrap(), 42);
}
