//! One-shot sandboxes against hostile programs and faults: signals, writes to
//! inputs, removal from outside, dropped futures, concurrent timeouts,
//! process and memory bombs, /proc and /sys, orphans. Each case asserts the
//! typed outcome, that nothing is left behind, and that the next run works.

mod common;

use std::time::{Duration, Instant};

use dockhand::{CacheMode, Client, Error, Sandbox, Type, Value};

/// The tests count this process's containers and volumes: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn code(name: &str, source: &str) -> Sandbox {
    Sandbox::code(name, source)
        .cache(CacheMode::Disable)
        .build()
        .expect("valid sandbox")
}

/// The client still runs a fresh sandbox correctly.
async fn assert_next_run_works(client: &Client) {
    let double = Sandbox::code("next-run", "result = x * 2")
        .input("x", Type::Int)
        .output("result", Type::Int)
        .cache(CacheMode::Disable)
        .build()
        .unwrap();
    let out = client.run(&double, [("x", 21)]).await.expect("next run");
    assert_eq!(out.get::<i64>("result").unwrap(), 42);
}

/// Containers and volumes of this process that still exist, after giving
/// background removals up to `wait` to finish.
async fn leftovers(client: &Client, wait: Duration) -> (usize, usize) {
    let started = Instant::now();
    loop {
        let containers = client.live_containers().await.unwrap().len();
        let volumes = volumes_of(dockhand::labels::session_id());
        if (containers == 0 && volumes == 0) || started.elapsed() > wait {
            return (containers, volumes);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn volumes_of(session: &str) -> usize {
    let out = std::process::Command::new("docker")
        .args([
            "volume",
            "ls",
            "-q",
            "--filter",
            &format!("label=dev.dockhand.session={session}"),
        ])
        .output()
        .expect("docker CLI");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[tokio::test]
async fn a_signal_death_is_reported_as_such() {
    let _serial = SERIAL.lock().await;
    let client = common::client().await;
    for (source, signal) in [
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", 9),
        (
            "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)",
            15,
        ),
        ("import os\nos.abort()", 6),
    ] {
        match client
            .run(&code("signals", source), dockhand::NO_INPUTS)
            .await
        {
            Err(Error::Killed { signal: got, .. }) => assert_eq!(got, signal, "{source}"),
            other => panic!("{source}: expected Killed, got {other:?}"),
        }
    }
    let err = client
        .run(
            &code("exits", "import sys\nsys.exit(3)"),
            dockhand::NO_INPUTS,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::NonZeroExit { exit_code: 3, .. }),
        "{err:?}"
    );
    common::assert_no_container("signals");
    assert_next_run_works(&client).await;
}

#[tokio::test]
async fn inputs_are_read_only_to_the_code() {
    let _serial = SERIAL.lock().await;
    let client = common::client().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("data.txt");
    std::fs::write(&file, "original").unwrap();
    let probe = Sandbox::code(
        "inputs-ro",
        "import os\nresults = []\nfor attempt in [lambda: open('/var/inputs/data', 'w').write('x'),\n                lambda: open('/var/inputs/new', 'w').write('x'),\n                lambda: os.remove('/var/inputs/data'),\n                lambda: os.chmod('/var/inputs/data', 0o777)]:\n    try:\n        attempt()\n        results.append('allowed')\n    except OSError:\n        results.append('denied')\nverdict = ','.join(results)\ncontent = open('/var/inputs/data').read()\n",
    )
    .input("data", Type::File)
    .output("verdict", Type::Str)
    .output("content", Type::Str)
    .cache(CacheMode::Disable)
    .build()
    .unwrap();
    let out = client
        .run(&probe, [("data", Value::File(file.clone()))])
        .await
        .unwrap();
    assert_eq!(
        out.get::<String>("verdict").unwrap(),
        "denied,denied,denied,denied"
    );
    assert_eq!(out.get::<String>("content").unwrap(), "original");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "original");
    assert_next_run_works(&client).await;
}

#[tokio::test]
async fn removal_from_outside_is_container_gone_and_leaves_no_volume() {
    let _serial = SERIAL.lock().await;
    let client = common::client().await;
    let sleeper = Sandbox::command("removed-outside", "sh")
        .args(["-c", "sleep 30"])
        .cache(CacheMode::Disable)
        .build()
        .unwrap();
    let run = tokio::spawn({
        let client = client.clone();
        async move { client.run(&sleeper, dockhand::NO_INPUTS).await }
    });
    // Wait for the container, then remove it the way an operator would.
    let mut id = None;
    // By its label: containers of earlier runs may still be on their way out.
    for _ in 0..100 {
        let found = common::docker(&[
            "ps",
            "-q",
            "--no-trunc",
            "--filter",
            "label=dev.dockhand.sandbox=removed-outside",
        ]);
        if let Some(found) = found.lines().next() {
            id = Some(found.to_string());
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let id = id.expect("the sandbox's container appeared");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let removed = std::process::Command::new("docker")
        .args(["rm", "-f", &id])
        .output()
        .unwrap();
    assert!(removed.status.success());
    match run.await.unwrap() {
        Err(Error::ContainerGone { id: gone }) => assert_eq!(gone, id),
        other => panic!("expected ContainerGone, got {other:?}"),
    }
    assert_eq!(leftovers(&client, Duration::from_secs(3)).await, (0, 0));
    assert_next_run_works(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_runs_leave_nothing_and_do_not_stall_the_runtime() {
    let _serial = SERIAL.lock().await;
    let client = common::client().await;
    // A ticker measures how long the runtime goes without polling it.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ticker = tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut worst = Duration::ZERO;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                tokio::time::sleep(Duration::from_millis(5)).await;
                worst = worst.max(t.elapsed().saturating_sub(Duration::from_millis(5)));
            }
            worst
        }
    });
    let slow = Sandbox::command("drop-storm", "sh")
        .args(["-c", "sleep 20"])
        .cache(CacheMode::Disable)
        .build()
        .unwrap();
    let mut runs = Vec::new();
    for i in 0..50u64 {
        let (client, slow) = (client.clone(), slow.clone());
        // Dropped at spread-out moments: before create, during create,
        // upload, start and while running.
        let after = Duration::from_millis(20 + i * 37 % 900);
        runs.push(tokio::spawn(async move {
            tokio::time::timeout(after, client.run(&slow, dockhand::NO_INPUTS)).await
        }));
    }
    for r in runs {
        assert!(r.await.unwrap().is_err(), "every run was dropped");
    }
    let (containers, volumes) = leftovers(&client, Duration::from_secs(5)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let worst = ticker.await.unwrap();
    eprintln!("drop storm: worst runtime stall {worst:?}");
    assert_eq!((containers, volumes), (0, 0), "left behind after 5 s");
    assert!(
        worst < Duration::from_millis(500),
        "runtime stalled {worst:?}"
    );
    assert_next_run_works(&client).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_timeouts_answer_near_their_limit() {
    let _serial = SERIAL.lock().await;
    let client = common::client().await;
    let limit = Duration::from_secs(2);
    let sleeper = Sandbox::command("timeouts", "sh")
        .args(["-c", "echo up; sleep 60"])
        .timeout(limit)
        .cache(CacheMode::Disable)
        .build()
        .unwrap();
    let mut runs = Vec::new();
    for _ in 0..20 {
        let (client, sleeper) = (client.clone(), sleeper.clone());
        runs.push(tokio::spawn(async move {
            let started = Instant::now();
            let result = client.run(&sleeper, dockhand::NO_INPUTS).await;
            (started.elapsed(), result)
        }));
    }
    let mut worst = Duration::ZERO;
    for r in runs {
        let (took, result) = r.await.unwrap();
        assert!(matches!(result, Err(Error::Timeout { .. })), "{result:?}");
        worst = worst.max(took);
    }
    eprintln!("20 concurrent 2 s timeouts: slowest answered after {worst:?}");
    // The limit counts from the call, create and start included.
    // Generous (a loaded machine): well short of the 60 s the code sleeps.
    assert!(worst < limit * 10, "slowest took {worst:?}");
    assert_eq!(leftovers(&client, Duration::from_secs(10)).await, (0, 0));
    assert_next_run_works(&client).await;
}

#[tokio::test]
async fn bombs_proc_sys_and_orphans_stay_inside() {
    let _serial = SERIAL.lock().await;
    let client = common::client().await;
    // A fork bomb hits the pids limit; the run ends (any way but hanging).
    let bomb = Sandbox::command("fork-bomb", "sh")
        .args(["-c", "b() { b | b & }; b; sleep 2; echo survived"])
        .pids(32)
        .timeout(Duration::from_secs(20))
        .cache(CacheMode::Disable)
        .build()
        .unwrap();
    let started = Instant::now();
    let _ = client.run(&bomb, dockhand::NO_INPUTS).await;
    assert!(started.elapsed() < Duration::from_secs(25));

    // /proc and /sys are read-only; the host's files are not there.
    let probe = code(
        "proc-sys",
        "import os\nresults = []\nfor path in ['/proc/sys/kernel/hostname', '/sys/kernel/mm/transparent_hugepage/enabled', '/proc/sysrq-trigger']:\n    try:\n        open(path, 'w').write('x')\n        results.append('written')\n    except OSError:\n        results.append('denied')\nprint(','.join(results))\n",
    );
    let out = client.run(&probe, dockhand::NO_INPUTS).await.unwrap();
    assert_eq!(out.stdout.text.trim(), "denied,denied,denied");

    // An orphan that outlives the main process goes with the container.
    let orphan = Sandbox::command("orphan", "sh")
        .args(["-c", "(sleep 300 &) ; echo parent done"])
        .cache(CacheMode::Disable)
        .build()
        .unwrap();
    let started = Instant::now();
    let out = client.run(&orphan, dockhand::NO_INPUTS).await.unwrap();
    assert_eq!(out.stdout.text, "parent done\n");
    // Generous: the orphan sleeps 300 s.
    assert!(started.elapsed() < Duration::from_secs(60));

    // Writes to every fd it has, and a huge argv.
    let noisy = code(
        "noisy-fds",
        "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'x')\n    except OSError:\n        pass\nprint('ok')\n",
    );
    assert_eq!(
        client
            .run(&noisy, dockhand::NO_INPUTS)
            .await
            .unwrap()
            .stdout
            .text,
        "ok\n"
    );
    let long_arg = "a".repeat(100_000);
    let argv = Sandbox::command("argv", "sh")
        .args(["-c", "echo ${#1}", "sh", long_arg.as_str()])
        .cache(CacheMode::Disable)
        .build()
        .unwrap();
    assert_eq!(
        client
            .run(&argv, dockhand::NO_INPUTS)
            .await
            .unwrap()
            .stdout
            .text,
        "100000\n"
    );
    for name in ["fork-bomb", "proc-sys", "orphan", "noisy-fds", "argv"] {
        common::assert_no_container(name);
    }
    assert_next_run_works(&client).await;
}

#[tokio::test]
async fn outputs_are_bounded_and_special_files_refused() {
    let _serial = SERIAL.lock().await;
    let client = common::client().await;
    // One file past the limit fails while it is written.
    let big = Sandbox::code(
        "big-output",
        "with open('/var/outputs/blob', 'wb') as f:\n    f.write(b'x' * (20 << 20))\n",
    )
    .verbatim()
    .output("blob", Type::File)
    .outputs_limit(10 << 20)
    .cache(CacheMode::Disable)
    .build()
    .unwrap();
    match client.run(&big, dockhand::NO_INPUTS).await {
        Err(Error::FileTooLarge { limit_bytes, .. }) => assert_eq!(limit_bytes, 10 << 20),
        other => panic!("expected FileTooLarge, got {other:?}"),
    }
    // Files under the limit that add up past it: a typed error naming the
    // output that crossed it, when the outputs are read.
    let many = Sandbox::code(
        "many-outputs",
        "for i in range(3):\n    with open(f'/var/outputs/blob{i}', 'wb') as f:\n        f.write(b'x' * (4 << 20))\n",
    )
    .verbatim()
    .output("blob2", Type::File)
    .outputs_limit(10 << 20)
    .cache(CacheMode::Disable)
    .build()
    .unwrap();
    match client.run(&many, dockhand::NO_INPUTS).await {
        Err(Error::OutputTooLarge { name, limit_bytes }) => {
            assert!(name.starts_with("blob"), "{name}");
            assert_eq!(limit_bytes, 10 << 20);
        }
        other => panic!("expected OutputTooLarge, got {other:?}"),
    }
    // Undeclared files count too: the limit bounds what is read at all.
    let hidden = Sandbox::code(
        "hidden-output",
        "for i in range(3):\n    with open(f'/var/outputs/junk{i}', 'wb') as f:\n        f.write(b'x' * (4 << 20))\nresult = 1\n",
    )
    .output("result", Type::Int)
    .outputs_limit(10 << 20)
    .cache(CacheMode::Disable)
    .build()
    .unwrap();
    assert!(matches!(
        client.run(&hidden, dockhand::NO_INPUTS).await,
        Err(Error::OutputTooLarge { .. })
    ));

    // Links out of the output, FIFOs and devices are refused.
    for (name, setup) in [
        ("link-out", "os.symlink('/etc/passwd', d + '/passwd')"),
        ("fifo-out", "os.mkfifo(d + '/pipe')"),
    ] {
        let sb = Sandbox::code(
            name,
            format!("import os\nd = '/var/outputs/tree'\nos.makedirs(d)\n{setup}\n"),
        )
        .verbatim()
        .output("tree", Type::Dir)
        .cache(CacheMode::Disable)
        .build()
        .unwrap();
        match client.run(&sb, dockhand::NO_INPUTS).await {
            Err(Error::UnsafeArchivePath { .. }) => {}
            other => panic!("{name}: expected UnsafeArchivePath, got {other:?}"),
        }
    }

    // Odd names arrive as they were written.
    let odd = Sandbox::code(
        "odd-names",
        "import os\nd = '/var/outputs/tree'\nos.makedirs(d)\nfor n in ['new\\nline', 'sp ace', 'ünï😀', '-dash', '.hidden']:\n    open(os.path.join(d, n), 'w').write(n)\n",
    )
    .verbatim()
    .output("tree", Type::Dir)
    .cache(CacheMode::Disable)
    .build()
    .unwrap();
    let out = client.run(&odd, dockhand::NO_INPUTS).await.unwrap();
    let dir: std::path::PathBuf = out.get("tree").unwrap();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["-dash", ".hidden", "new\nline", "sp ace", "ünï😀"]);
    for n in &names {
        assert_eq!(&std::fs::read_to_string(dir.join(n)).unwrap(), n);
    }

    // A forged status file larger than any the runner writes is not read.
    let forged = Sandbox::code(
        "forged-status",
        "import os\nos.makedirs('/var/outputs/.dockhand', exist_ok=True)\nopen('/var/outputs/.dockhand/status.json', 'w').write('{\"unassigned\": [\"result\"]}' + ' ' * (2 << 20))\nopen('/var/outputs/result', 'w').write('7')\n",
    )
    .verbatim()
    .output("result", Type::Int)
    .cache(CacheMode::Disable)
    .build()
    .unwrap();
    assert_eq!(
        client
            .run(&forged, dockhand::NO_INPUTS)
            .await
            .unwrap()
            .get::<i64>("result")
            .unwrap(),
        7
    );
    for name in [
        "big-output",
        "many-outputs",
        "hidden-output",
        "link-out",
        "fifo-out",
        "odd-names",
    ] {
        common::assert_no_container(name);
    }
    assert_next_run_works(&client).await;
}

#[tokio::test]
async fn huge_binary_and_invalid_utf8_output_is_counted_exactly() {
    let _serial = SERIAL.lock().await;
    let client = common::client().await;
    let noisy = Sandbox::code(
        "byte-counts",
        "import sys\nsys.stdout.buffer.write(b'a' * (3 << 20))\nsys.stdout.buffer.write(b'\\xff\\xfe\\x00' * 1000)\nsys.stderr.buffer.write(b'\\xc3\\x28 bad utf-8')\n",
    )
    .output_limit(1 << 20)
    .cache(CacheMode::Disable)
    .build()
    .unwrap();
    let out = client.run(&noisy, dockhand::NO_INPUTS).await.unwrap();
    assert_eq!(out.stdout.total_bytes, (3 << 20) + 3000);
    assert!(out.stdout.truncated);
    assert!(
        out.stdout.text.len() <= (1 << 20) + 2,
        "kept {}",
        out.stdout.text.len()
    );
    assert_eq!(out.stderr.total_bytes, 12);
    assert!(!out.stderr.truncated);
    assert!(out.stderr.text.ends_with("( bad utf-8"));
    assert_next_run_works(&client).await;
}

#[tokio::test]
async fn egress_and_disk_bombs_fail_inside() {
    let _serial = SERIAL.lock().await;
    let client = common::client().await;
    // No network by default: name resolution and connections fail inside.
    let egress = code(
        "egress",
        "import socket\ntry:\n    socket.getaddrinfo('example.com', 80)\n    print('resolved')\nexcept OSError:\n    print('no network')\n",
    );
    assert_eq!(
        client
            .run(&egress, dockhand::NO_INPUTS)
            .await
            .unwrap()
            .stdout
            .text,
        "no network\n"
    );
    // Filling /tmp fails with ENOSPC inside; the host is unaffected.
    let fill = code(
        "disk-bomb",
        "import errno\ntry:\n    with open('/tmp/fill', 'wb') as f:\n        while True:\n            f.write(b'x' * (1 << 20))\nexcept OSError as e:\n    print('full' if e.errno == errno.ENOSPC else e)\n",
    );
    assert_eq!(
        client
            .run(&fill, dockhand::NO_INPUTS)
            .await
            .unwrap()
            .stdout
            .text,
        "full\n"
    );
    common::assert_no_container("egress");
    common::assert_no_container("disk-bomb");
    assert_next_run_works(&client).await;
}

/// The run answers at the runner's frame without waiting for the exit. Code
/// that finds this run's marker can send a frame of its own and carry on:
/// that only claims outputs it could have assigned anyway, and what it does
/// afterwards ends with its container, which is removed at once.
#[tokio::test]
async fn a_forged_frame_is_only_the_code_s_own_word() {
    let _serial = SERIAL.lock().await;
    let client = common::client().await;
    let forger = Sandbox::code(
        "forged-frame",
        "import gc, json, os, sys, time\n\
         gc.unfreeze()\n\
         job = next(o for o in gc.get_objects() if isinstance(o, dict) and 'frame' in o and 'main' in o)\n\
         marker = job['frame']\n\
         os.write(2, (marker + '\\n').encode())\n\
         os.write(1, (marker + json.dumps({'outputs': {'y': '999'}, 'bytes': 0}) + '\\n').encode())\n\
         time.sleep(60)\n\
         y = x\n",
    )
    .input("x", Type::Int)
    .output("y", Type::Int)
    .cache(CacheMode::Disable)
    .timeout(Duration::from_secs(30))
    .build()
    .unwrap();
    let started = Instant::now();
    let out = client
        .run(&forger, [("x", 1)])
        .await
        .expect("the forged frame");
    assert_eq!(out.get::<i64>("y").unwrap(), 999);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "waited for the code"
    );
    // The sleeping code did not outlive its answer.
    assert_eq!(leftovers(&client, Duration::from_secs(15)).await, (0, 0));
    // Likewise in a warm container, whose interpreter was started before the job.
    let pool = client
        .pool(&forger, dockhand::pool::PoolConfig::new(1))
        .await
        .unwrap();
    assert!(pool.wait_ready(Duration::from_secs(60)).await);
    let started = Instant::now();
    let out = pool
        .run([("x", 1)])
        .await
        .expect("the forged frame, pooled");
    assert_eq!(out.get::<i64>("y").unwrap(), 999);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "waited for the code"
    );
    pool.shutdown().await;
    assert_eq!(leftovers(&client, Duration::from_secs(15)).await, (0, 0));
    assert_next_run_works(&client).await;
}
