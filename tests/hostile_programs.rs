//! One-shots against a catalogue of hostile programs: signals to everything,
//! stopping itself, CPU, memory and thread bombs, zombies, early exits,
//! closed standard streams, floods, forged and malformed outputs, links and
//! devices, privilege and namespace escapes, file-size bombs. Each case
//! asserts its typed outcome and that its container is gone; every group
//! ends with a run that must still return its own correct result.

mod common;

use std::time::Duration;

use dockhand::{CacheMode, Client, Error, RunOutput, Sandbox, SandboxBuilder, Type};

type Check = fn(dockhand::Result<RunOutput>);

fn python(name: &str, source: &str) -> SandboxBuilder {
    Sandbox::code(name, source).cache(CacheMode::Disable)
}

fn shell(name: &str, script: &str) -> SandboxBuilder {
    Sandbox::command(name, "sh")
        .args(["-c", script])
        .cache(CacheMode::Disable)
}

/// Runs each case, checks its outcome and that its container is gone, then
/// that the client still runs a fresh sandbox correctly.
async fn run_all(cases: Vec<(SandboxBuilder, Check)>) {
    let client = common::client().await;
    for (builder, check) in cases {
        let sandbox = builder.build().expect("valid sandbox");
        let result = client.run(&sandbox, dockhand::NO_INPUTS).await;
        check(result);
        common::assert_no_container(sandbox.name());
    }
    assert_next_run_works(&client).await;
}

async fn assert_next_run_works(client: &Client) {
    let double = python("next-run", "result = x * 2")
        .input("x", Type::Int)
        .output("result", Type::Int)
        .build()
        .unwrap();
    let out = client.run(&double, [("x", 21)]).await.expect("next run");
    assert_eq!(out.get::<i64>("result").unwrap(), 42);
}

fn printed(result: dockhand::Result<RunOutput>) -> String {
    match result {
        Ok(out) => out.stdout.text,
        Err(e) => panic!("expected a successful run, got {e:?}"),
    }
}

#[tokio::test]
async fn signals_stops_and_early_exits() {
    run_all(vec![
        // Signals init and every process it may signal: init survives,
        // the background process does not, and the run ends normally.
        (
            shell(
                "kill-all",
                "sleep 100 & kill -9 1; kill -9 -1; sleep 0.2; kill -0 $! 2>/dev/null || echo child gone",
            ),
            |r| assert_eq!(printed(r), "child gone\n"),
        ),
        // Stops itself: only the time limit ends it.
        (
            shell("stop-self", "kill -STOP $$; echo resumed").timeout(Duration::from_secs(2)),
            |r| assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}"),
        ),
        // Ignores SIGTERM and every catchable signal.
        (
            shell("ignore-signals", "trap '' TERM INT HUP QUIT USR1 USR2; sleep 60")
                .timeout(Duration::from_secs(2)),
            |r| assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}"),
        ),
        // Leaves before its declared output is written.
        (
            python("early-exit", "import os\nos._exit(0)\nresult = 1").output("result", Type::Int),
            |r| {
                assert!(
                    matches!(&r, Err(Error::OutputNotAssigned { name } | Error::MissingOutput { name }) if name == "result"),
                    "{r:?}"
                )
            },
        ),
        // Closes its standard streams and goes on.
        (
            python("closed-streams", "import os\nos.close(1)\nos.close(2)\nresult = 5")
                .output("result", Type::Int),
            |r| assert_eq!(r.expect("runs").get::<i64>("result").unwrap(), 5),
        ),
        // Leaves zombies: children that exit and are never waited for.
        (
            python(
                "zombies",
                "import os\nfor _ in range(20):\n    if os.fork() == 0:\n        os._exit(0)\nprint('left zombies')",
            ),
            |r| assert_eq!(printed(r), "left zombies\n"),
        ),
        // Its own session and process group, detached from the main process.
        (
            shell("setsid-orphan", "setsid sh -c 'sleep 300' & echo detached"),
            |r| assert_eq!(printed(r), "detached\n"),
        ),
    ])
    .await;
}

#[tokio::test]
async fn cpu_memory_thread_and_file_size_bombs() {
    run_all(vec![
        (
            python(
                "cpu-bomb",
                "import threading\ndef spin():\n    while True:\n        pass\nfor _ in range(8):\n    threading.Thread(target=spin, daemon=True).start()\nspin()",
            )
            .cpus(0.5)
            .timeout(Duration::from_secs(2)),
            |r| assert!(matches!(r, Err(Error::Timeout { .. })), "{r:?}"),
        ),
        (
            python("memory-bomb", "hog = []\nwhile True:\n    hog.append(bytearray(1 << 20))")
                .memory("64m"),
            |r| assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}"),
        ),
        // Catches MemoryError and keeps allocating: the kernel still ends it.
        (
            python(
                "memory-bomb-caught",
                "hog = []\nwhile True:\n    try:\n        hog.append(bytearray(8 << 20))\n    except BaseException:\n        pass",
            )
            .memory("64m")
            .timeout(Duration::from_secs(20)),
            |r| assert!(matches!(r, Err(Error::OutOfMemory { .. })), "{r:?}"),
        ),
        // Threads count against the pids limit; creation fails inside.
        (
            python(
                "thread-bomb",
                "import threading, time\nn = 0\ntry:\n    while n < 10000:\n        threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n        n += 1\nexcept RuntimeError:\n    pass\nprint(n)\nimport os\nos._exit(0)",
            )
            .pids(32),
            |r| {
                let n: u32 = printed(r).trim().parse().expect("a count");
                assert!(n < 32, "started {n} threads under a limit of 32");
            },
        ),
        // One file past the outputs limit fails inside with EFBIG.
        (
            python(
                "file-size-bomb",
                "import errno\ntry:\n    with open('/var/outputs/blob', 'wb') as f:\n        for _ in range(64):\n            f.write(b'x' * (1 << 20))\n    print('wrote it all')\nexcept OSError as e:\n    print(errno.errorcode[e.errno])",
            )
            .outputs_limit(8 << 20),
            |r| assert_eq!(printed(r), "EFBIG\n"),
        ),
        // A program without a handler for SIGXFSZ dies of it; an uncaught
        // EFBIG ends Python. Both are reported as the file limit.
        (
            shell("file-size-bomb-shell", "head -c 20000000 /dev/zero > /var/outputs/blob")
                .outputs_limit(8 << 20),
            |r| {
                assert!(
                    matches!(r, Err(Error::FileTooLarge { limit_bytes, .. }) if limit_bytes == 8 << 20),
                    "{r:?}"
                )
            },
        ),
        (
            python("file-size-bomb-uncaught", "open('/tmp/big', 'wb').write(b'x' * (9 << 20))")
                .outputs_limit(8 << 20),
            |r| assert!(matches!(r, Err(Error::FileTooLarge { .. })), "{r:?}"),
        ),
        // A flood with no newline is counted exactly and kept bounded.
        (
            python("one-line-flood", "import sys\nsys.stdout.write('y' * (8 << 20))")
                .output_limit(64 << 10),
            |r| {
                let out = r.expect("runs");
                assert_eq!(out.stdout.total_bytes, 8 << 20);
                assert!(out.stdout.truncated);
                assert!(out.stdout.text.len() <= (64 << 10) + 2);
            },
        ),
    ])
    .await;
}

#[tokio::test]
async fn malformed_and_forged_outputs() {
    run_all(vec![
        (
            python("non-utf8-str", "open('/var/outputs/s', 'wb').write(b'\\xff\\xfe')")
                .verbatim()
                .output("s", Type::Str),
            |r| assert!(matches!(&r, Err(Error::BadOutput { name, .. }) if name == "s"), "{r:?}"),
        ),
        (
            python("garbage-int", "open('/var/outputs/n', 'w').write('12 monkeys')")
                .verbatim()
                .output("n", Type::Int),
            |r| assert!(matches!(&r, Err(Error::BadOutput { name, .. }) if name == "n"), "{r:?}"),
        ),
        (
            python("symlink-file", "import os\nos.symlink('/etc/passwd', '/var/outputs/f')")
                .verbatim()
                .output("f", Type::File),
            |r| {
                assert!(
                    matches!(r, Err(Error::UnsafeArchivePath { .. } | Error::BadOutput { .. })),
                    "{r:?}"
                )
            },
        ),
        (
            python("symlink-dir", "import os\nos.symlink('/', '/var/outputs/tree')")
                .verbatim()
                .output("tree", Type::Dir),
            |r| {
                assert!(
                    matches!(r, Err(Error::UnsafeArchivePath { .. } | Error::BadOutput { .. })),
                    "{r:?}"
                )
            },
        ),
        (
            python("dir-for-file", "import os\nos.makedirs('/var/outputs/f/inner')")
                .verbatim()
                .output("f", Type::File),
            |r| assert!(matches!(&r, Err(Error::BadOutput { name, .. }) if name == "f"), "{r:?}"),
        ),
        // Takes away every permission on its outputs: they are still read.
        (
            shell(
                "chmod-outputs",
                "echo 7 > /var/outputs/n; chmod 000 /var/outputs/n; chmod 000 /var/outputs 2>/dev/null; true",
            )
            .output("n", Type::Int),
            |r| assert_eq!(r.expect("runs").get::<i64>("n").unwrap(), 7),
        ),
        // Hard links inside a Dir output arrive as copies of their target.
        (
            python(
                "hardlink-inside",
                "import os\nd = '/var/outputs/tree'\nos.makedirs(d)\nopen(d + '/a', 'w').write('same')\nos.link(d + '/a', d + '/b')",
            )
            .verbatim()
            .output("tree", Type::Dir),
            |r| {
                // The files live as long as the output that holds them.
                let out = r.expect("runs");
                let dir: std::path::PathBuf = out.get("tree").unwrap();
                for name in ["a", "b"] {
                    assert_eq!(std::fs::read_to_string(dir.join(name)).unwrap(), "same");
                }
            },
        ),
        // Many small files: all arrive.
        (
            python(
                "many-files",
                "import os\nd = '/var/outputs/tree'\nos.makedirs(d)\nfor i in range(3000):\n    open(f'{d}/{i}', 'w').write(str(i))",
            )
            .verbatim()
            .output("tree", Type::Dir),
            |r| {
                // The files live as long as the output that holds them.
                let out = r.expect("runs");
                let dir: std::path::PathBuf = out.get("tree").unwrap();
                assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 3000);
                assert_eq!(std::fs::read_to_string(dir.join("2999")).unwrap(), "2999");
            },
        ),
    ])
    .await;
}

#[tokio::test]
async fn privileges_devices_and_namespaces_stay_closed() {
    let denied = |r: dockhand::Result<RunOutput>| {
        let text = printed(r);
        assert!(
            text.lines().all(|l| l.ends_with(" denied")),
            "something was allowed:\n{text}"
        );
    };
    let probe = |name: &str, attempts: &[(&str, &str)]| {
        let mut source = String::from("import os, stat, ctypes\n");
        for (label, statement) in attempts {
            source.push_str(&format!(
                "try:\n    {statement}\n    print('{label} allowed')\nexcept Exception:\n    print('{label} denied')\n"
            ));
        }
        python(name, &source)
    };
    run_all(vec![
        (
            probe(
                "devices",
                &[
                    ("mknod", "os.mknod('/tmp/mem', stat.S_IFCHR | 0o600, os.makedev(1, 1))"),
                    ("dev-mem", "open('/dev/mem', 'rb').read(1)"),
                    ("kmsg", "open('/dev/kmsg', 'rb').read(1)"),
                    ("disk", "open('/dev/' + sorted(os.listdir('/sys/block'))[0], 'rb')"),
                ],
            ),
            denied,
        ),
        (
            probe(
                "privileges",
                &[
                    ("setuid", "os.setuid(0)"),
                    ("etc", "open('/etc/passwd', 'a').write('x')"),
                    (
                        "oom-score",
                        "os.write(os.open('/proc/self/oom_score_adj', os.O_WRONLY), b'-1000')",
                    ),
                    ("hostname", "__import__('socket').sethostname('evil')"),
                    ("chroot", "os.chroot('/tmp')"),
                ],
            ),
            denied,
        ),
        (
            probe(
                "namespaces",
                &[
                    ("unshare", "assert ctypes.CDLL(None, use_errno=True).unshare(0x10000000) == 0"),
                    ("mount", "assert ctypes.CDLL(None, use_errno=True).mount(b'none', b'/tmp', b'tmpfs', 0, None) == 0"),
                    ("bpf", "assert ctypes.CDLL(None, use_errno=True).syscall(321, 0, 0, 0) >= 0"),
                    ("reboot", "assert ctypes.CDLL(None, use_errno=True).reboot(0x4321fedc) == 0"),
                ],
            ),
            denied,
        ),
    ])
    .await;
}
