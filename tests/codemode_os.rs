//! Code mode's policies and Monty's OS calls against a real code host:
//! everyday code the default policy lets through, what the strict policy
//! refuses, sleeps (alone, gathered, past the deadline), the environment
//! map, a fixed clock, a seeded `random` and mounted directories (read-only,
//! overlay, read-write and downloaded).

mod common;

use std::time::{Duration, Instant, UNIX_EPOCH};

use common::{code_error, code_host};
use dockhand::codemode::{CodeError, CodeHost, CodeHostConfig, CodePolicy, MountMode, Toolset};
use serde_json::{json, Value};

async fn value(host: &CodeHost, code: &str) -> Value {
    match host.execute(code, json!({}), &Toolset::new()).await {
        Ok(run) => run.value,
        Err(e) => panic!("{code:?} failed: {e}"),
    }
}

fn runtime(e: &CodeError, ty: &str) -> bool {
    matches!(e, CodeError::Runtime { exception_type, .. } if exception_type == ty)
}

/// Everyday model-written code that a rule used to refuse runs as in Monty.
#[tokio::test]
async fn the_default_policy_runs_everyday_code() {
    let host = code_host(CodeHostConfig::new()).await;
    for (code, want) in [
        ("type(3).__name__", json!("int")),
        ("class P:\n    pass\np = P()\np.__class__ is P", json!(true)),
        ("r = 0\nif __name__ == '__main__':\n    r = 1\nr", json!(1)),
        (
            "from __future__ import annotations\ndef f(x: int) -> int:\n    return x\nf(2)",
            json!(2),
        ),
        (
            "try:\n    import pandas\n    r = 'pandas'\nexcept ImportError:\n    r = 'none'\nr",
            json!("none"),
        ),
        // A loop over a bare tuple: one iterable, not two arguments.
        ("t = []\nfor x in 1, 2:\n    t.append(x)\nt", json!([1, 2])),
        (
            "a = [1]\nb = [2, 3]\n[x for x in (*a, *b)]",
            json!([1, 2, 3]),
        ),
        // No loop guard: only the time limit stops a long loop.
        ("n = 0\nfor i in range(50000):\n    n += 1\nn", json!(50000)),
    ] {
        assert_eq!(value(&host, code).await, want, "{code}");
    }
    // What Monty itself refuses still fails, as Monty's own exception.
    let e = code_error(
        host.execute("open('/etc/passwd').read()", json!({}), &Toolset::new())
            .await,
    );
    assert!(runtime(&e, "PermissionError"), "{e:?}");
    assert!(e.to_string().contains("/etc/passwd"), "{e}");
    let e = code_error(
        host.execute("import subprocess", json!({}), &Toolset::new())
            .await,
    );
    assert!(runtime(&e, "ModuleNotFoundError"), "{e:?}");
    host.close().await.unwrap();
}

/// The strict policy refuses internals and keeps the loop guard, and the
/// guard takes a bare tuple and reports the user's line.
#[tokio::test]
async fn the_strict_policy_refuses_internals_and_guards_loops() {
    let host = code_host(
        CodeHostConfig::new()
            .policy(CodePolicy::Strict)
            .loop_limit(100),
    )
    .await;
    for (code, rule) in [
        ("p = 1\np.__class__", "dunder"),
        ("f = len\nf.__globals__", "dunder"),
        ("import os", "import"),
        ("eval('1')", "builtin"),
    ] {
        match code_error(host.execute(code, json!({}), &Toolset::new()).await) {
            CodeError::Validation { rule: got, .. } => assert_eq!(got, rule, "{code}"),
            other => panic!("{code}: {other:?}"),
        }
    }
    assert_eq!(value(&host, "type(3).__name__").await, json!("int"));
    assert_eq!(
        value(&host, "t = []\nfor x in 1, 2:\n    t.append(x)\nt").await,
        json!([1, 2])
    );
    let e = code_error(
        host.execute(
            "x = 0\nfor i in *range(60), *range(60):\n    x += i",
            json!({}),
            &Toolset::new(),
        )
        .await,
    );
    assert!(matches!(e, CodeError::LoopLimit { line: 2, .. }), "{e:?}");
    host.close().await.unwrap();
}

/// `time.sleep` waits; gathered `asyncio.sleep`s overlap; a sleep past the
/// time limit ends as the typed timeout, and the host runs on.
#[tokio::test]
async fn sleeps_wait_overlap_and_end_at_the_deadline() {
    let host = code_host(CodeHostConfig::new().timeout(Duration::from_secs(3))).await;
    let started = Instant::now();
    assert_eq!(
        value(&host, "import time\ntime.sleep(0.3)\n'slept'").await,
        json!("slept")
    );
    assert!(started.elapsed() >= Duration::from_millis(300));

    // 20 sleeps of 0.5 s, gathered: together, not one after another (10 s).
    let started = Instant::now();
    let code = "import asyncio\nr = await asyncio.gather(*[asyncio.sleep(0.5, i) for i in range(20)])\nlen(r)";
    assert_eq!(value(&host, code).await, json!(20));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(3),
        "{took:?}"
    );

    // Hostile: sleeps that would outlast the limit, caught or not.
    for code in [
        "import time\ntime.sleep(10**9)",
        "import time\nwhile True:\n    try:\n        time.sleep(1)\n    except BaseException:\n        pass",
        "import asyncio\nawait asyncio.sleep(3600)",
    ] {
        let started = Instant::now();
        let e = code_error(host.execute(code, json!({}), &Toolset::new()).await);
        assert!(matches!(e, CodeError::Timeout { .. }), "{code}: {e:?}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{code} ended after {:?}",
            started.elapsed()
        );
        assert_eq!(value(&host, "1 + 1").await, json!(2), "after {code}");
    }
    host.close().await.unwrap();
}

/// `os.getenv` and `os.environ` see the host's map and nothing else: not
/// the container's environment (`HOME`, `PATH`).
#[tokio::test]
async fn the_environment_is_the_map_the_host_gives() {
    let host = code_host(
        CodeHostConfig::new()
            .env("REGION", "eu-west-1")
            .env("MODE", "test"),
    )
    .await;
    assert_eq!(
        value(
            &host,
            "import os\n[os.getenv('REGION'), os.getenv('HOME'), os.getenv('PATH', 'unset'), os.getenv('MODE', 'x')]"
        )
        .await,
        json!(["eu-west-1", null, "unset", "test"])
    );
    assert_eq!(
        value(&host, "import os\nsorted(os.environ.keys())").await,
        json!(["MODE", "REGION"])
    );
    host.close().await.unwrap();
}

/// A fixed clock and a seed make an execution replayable; without them two
/// executions differ.
#[tokio::test]
async fn a_fixed_clock_and_a_seed_replay_an_execution() {
    let at = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let host = code_host(CodeHostConfig::new().fixed_clock(at).random_seed(42)).await;
    let code = "import random, time, datetime\n[time.time(), datetime.datetime.now(datetime.timezone.utc).isoformat(), random.random(), random.randint(1, 10**6)]";
    let first = value(&host, code).await;
    assert_eq!(first[0], json!(1_700_000_000.0));
    assert_eq!(first[1], json!("2023-11-14T22:13:20+00:00"));
    // As CPython's `random.seed(42)` leaves it.
    assert_eq!(first[2], json!(0.6394267984578837));
    assert_eq!(value(&host, code).await, first, "the same again");
    host.close().await.unwrap();

    let host = code_host(CodeHostConfig::new()).await;
    let code = "import random\nrandom.random()";
    assert_ne!(value(&host, code).await, value(&host, code).await);
    host.close().await.unwrap();
}

/// A host directory mounted read-only is read with `open` and `pathlib`;
/// writes, `..`, a link pointing out of it and paths outside it fail as
/// Python expects, with nothing of the host's read. An overlay takes writes
/// for one execution and never reaches the host.
#[tokio::test]
async fn mounted_directories_are_readable_and_closed() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rows.csv"), "a,b\n1,2\n").unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("sub/x.json"), r#"{"k": [1, 2]}"#).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("passwd")).unwrap();
    let host = code_host(
        CodeHostConfig::new()
            .mount("/data", dir.path(), MountMode::ReadOnly)
            .mount("/scratch", dir.path(), MountMode::Overlay),
    )
    .await;
    let code = "import json, pathlib\nrows = open('/data/rows.csv').read().splitlines()\nk = json.loads(pathlib.Path('/data/sub/x.json').read_text())['k']\n[rows, k, sorted(p.name for p in pathlib.Path('/data').iterdir())]";
    assert_eq!(
        value(&host, code).await,
        // The link that points out of the directory is not even listed.
        json!([["a,b", "1,2"], [1, 2], ["rows.csv", "sub"]])
    );
    for code in [
        "open('/data/new.txt', 'w').write('x')",
        "open('/data/../etc/passwd').read()",
        "open('/data/passwd').read()",
        "open('/etc/passwd').read()",
        "import pathlib\npathlib.Path('/data/sub/../../etc/hostname').read_text()",
    ] {
        let e = code_error(host.execute(code, json!({}), &Toolset::new()).await);
        assert!(
            ["PermissionError", "FileNotFoundError", "OSError"]
                .iter()
                .any(|ty| runtime(&e, ty)),
            "{code}: {e:?}"
        );
        assert!(!e.to_string().contains("root:"), "{code}: {e}");
    }
    assert!(!dir.path().join("new.txt").exists());
    // The overlay: written and read back in one execution, gone in the next.
    assert_eq!(
        value(
            &host,
            "open('/scratch/new.txt', 'w').write('hi')\nopen('/scratch/new.txt').read()"
        )
        .await,
        json!("hi")
    );
    assert_eq!(
        value(&host, "import os\nos.path.exists('/scratch/new.txt')").await,
        json!(false)
    );
    assert!(
        !dir.path().join("new.txt").exists(),
        "nothing reached the host"
    );
    host.close().await.unwrap();

    // A mount of a directory that is not there: a clear error at start.
    let err = common::client()
        .await
        .code_host(CodeHostConfig::new().mount("/data", "/no/such/dir", MountMode::ReadOnly))
        .start()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("/no/such/dir"), "{err}");
}

/// A read-write mount keeps the code's changes from one execution to the
/// next, comes back whole through `download_mount`, and never writes the
/// host's directory.
#[tokio::test]
async fn a_read_write_mount_keeps_changes_and_downloads_them() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("in.txt"), "one\n").unwrap();
    let host = code_host(
        CodeHostConfig::new()
            .mount("/work", dir.path(), MountMode::ReadWrite)
            .mounts_size(4 << 20),
    )
    .await;
    value(
        &host,
        "import pathlib\np = pathlib.Path('/work/out')\np.mkdir()\n(p / 'report.txt').write_text(open('/work/in.txt').read() + 'two\\n')",
    )
    .await;
    assert_eq!(
        value(&host, "open('/work/out/report.txt').read()").await,
        json!("one\ntwo\n"),
        "the change lasts into the next execution"
    );
    assert!(
        !dir.path().join("out").exists(),
        "the host's directory is untouched"
    );
    // Hostile: filling the mount stops at its size, and making more files
    // than it has room for (one per 4 KiB: 1,024 here) stops too, each with
    // the OSError Python code expects; cleaning up leaves the host usable.
    for (fill, clean_up) in [
        (
            "f = open('/work/fill', 'w')\nfor i in range(64):\n    f.write('x' * (1 << 20))\nf.close()",
            "import pathlib\np = pathlib.Path('/work/fill')\nif p.exists():\n    p.unlink()\nnot p.exists()",
        ),
        (
            "import pathlib\nd = pathlib.Path('/work/many')\nd.mkdir()\nfor i in range(2000):\n    (d / str(i)).write_text('')",
            "import pathlib\nd = pathlib.Path('/work/many')\nn = 0\nfor p in d.iterdir():\n    p.unlink()\n    n += 1\nd.rmdir()\nn > 900 and not d.exists()",
        ),
    ] {
        let e = code_error(host.execute(fill, json!({}), &Toolset::new()).await);
        assert!(runtime(&e, "OSError"), "{fill}: {e:?}");
        assert_eq!(value(&host, clean_up).await, json!(true), "{clean_up}");
    }

    let to = tempfile::tempdir().unwrap();
    let copy = to.path().join("work");
    host.download_mount("/work/", &copy).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(copy.join("in.txt")).unwrap(),
        "one\n"
    );
    assert_eq!(
        std::fs::read_to_string(copy.join("out/report.txt")).unwrap(),
        "one\ntwo\n"
    );
    // A second download into the same place is refused; nothing mounted
    // there is a clear error.
    let again = host.download_mount("/work", &copy).await.unwrap_err();
    assert!(again.to_string().contains("already exists"), "{again}");
    let none = host
        .download_mount("/nowhere", to.path().join("x"))
        .await
        .unwrap_err();
    assert!(
        none.to_string()
            .contains("nothing is mounted at `/nowhere`"),
        "{none}"
    );
    host.close().await.unwrap();
    let closed = host
        .download_mount("/work", to.path().join("y"))
        .await
        .unwrap_err();
    assert!(
        matches!(closed, dockhand::Error::CodeHostUnavailable { .. }),
        "{closed}"
    );

    // Directories larger than the mounts' size are refused before a start.
    std::fs::write(dir.path().join("big"), vec![b'x'; 5 << 20]).unwrap();
    let err = common::client()
        .await
        .code_host(
            CodeHostConfig::new()
                .mount("/work", dir.path(), MountMode::ReadWrite)
                .mounts_size(4 << 20),
        )
        .start()
        .await
        .unwrap_err();
    assert!(err.to_string().contains("mounts_size"), "{err}");
}
