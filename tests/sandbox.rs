//! One-shot sandboxes against the real daemon: every type, every mode, every error.

mod common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::NaiveDateTime;
use dockhand::{Error, RunOptions, Sandbox, StreamKind, Type, Value};
use serde::{Deserialize, Serialize};

#[tokio::test]
async fn auto_io_round_trips_every_scalar_type() {
    let client = common::client().await;
    let sb = Sandbox::code(
        "types",
        "i2 = i + 1\nf2 = f * 2\ns2 = s.upper()\nb2 = not b\n\
         d2 = d + td\ntd2 = td * 3\nj2 = {'n': len(j['xs']), 'xs': j['xs'][::-1], 'type': type(d).__name__}\n",
    )
    .input("i", Type::Int)
    .input("f", Type::Float)
    .input("s", Type::Str)
    .input("b", Type::Bool)
    .input("d", Type::Datetime)
    .input("td", Type::Timedelta)
    .input("j", Type::Json)
    .output("i2", Type::Int)
    .output("f2", Type::Float)
    .output("s2", Type::Str)
    .output("b2", Type::Bool)
    .output("d2", Type::Datetime)
    .output("td2", Type::Timedelta)
    .output("j2", Type::Json)
    .build()
    .unwrap();
    let when = NaiveDateTime::parse_from_str("2024-01-01T00:00:00", "%Y-%m-%dT%H:%M:%S").unwrap();
    let out = client
        .run(
            &sb,
            [
                ("i", Value::from(41)),
                ("f", 1.25.into()),
                ("s", "héllo wörld".into()),
                ("b", false.into()),
                ("d", when.into()),
                ("td", Duration::from_secs(3600).into()),
                ("j", serde_json::json!({"xs": [1, "two", null]}).into()),
            ],
        )
        .await
        .unwrap();
    assert_eq!(out.get::<i64>("i2").unwrap(), 42);
    assert_eq!(out.get::<f64>("f2").unwrap(), 2.5);
    assert_eq!(out.get::<String>("s2").unwrap(), "HÉLLO WÖRLD");
    assert!(out.get::<bool>("b2").unwrap());
    assert_eq!(
        out.get::<NaiveDateTime>("d2").unwrap().to_string(),
        "2024-01-01 01:00:00"
    );
    assert_eq!(
        out.get::<Duration>("td2").unwrap(),
        Duration::from_secs(3 * 3600)
    );
    assert_eq!(
        out.get::<serde_json::Value>("j2").unwrap(),
        serde_json::json!({"n": 3, "xs": [null, "two", 1], "type": "datetime"})
    );
    let (i2, f2): (i64, f64) = {
        let t: (
            i64,
            f64,
            String,
            bool,
            NaiveDateTime,
            Duration,
            serde_json::Value,
        ) = out.outputs.tuple().unwrap();
        (t.0, t.1)
    };
    assert_eq!((i2, f2), (42, 2.5));
    assert_eq!(out.exit_code, 0);
    common::assert_no_container("types");
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Order {
    id: u32,
    items: Vec<String>,
}

#[tokio::test]
async fn serde_types_travel_as_json() {
    let client = common::client().await;
    let sb = Sandbox::code("orders", "order['items'].append('gift')\nupdated = order")
        .input("order", Type::Json)
        .output("updated", Type::Json)
        .build()
        .unwrap();
    let order = Order {
        id: 7,
        items: vec!["book".into()],
    };
    let out = client
        .run(&sb, [("order", Value::json(&order).unwrap())])
        .await
        .unwrap();
    let back: Order = out.outputs.json("updated").unwrap();
    assert_eq!(
        back,
        Order {
            id: 7,
            items: vec!["book".into(), "gift".into()]
        }
    );
}

#[tokio::test]
async fn file_and_dir_inputs_and_outputs() {
    let client = common::client().await;
    let host = tempfile::tempdir().unwrap();
    let data = host.path().join("data.csv");
    std::fs::write(&data, "a,b\n1,2\n3,4\n").unwrap();
    let tree = host.path().join("tree");
    std::fs::create_dir_all(tree.join("nested")).unwrap();
    std::fs::write(tree.join("top.txt"), "top").unwrap();
    std::fs::write(tree.join("nested/deep.txt"), "deep").unwrap();

    let sb = Sandbox::code(
        "files",
        "import os\n\
         rows = open(data).read().splitlines()\n\
         count = len(rows) - 1\n\
         names = sorted(os.path.relpath(os.path.join(r, f), tree) for r, _, fs in os.walk(tree) for f in fs)\n\
         open('/var/outputs/report', 'w').write('rows=%d' % count)\n\
         os.makedirs('/var/outputs/bundle/sub')\n\
         open('/var/outputs/bundle/sub/x.txt', 'w').write(open(os.path.join(tree, 'nested/deep.txt')).read())\n\
         os.symlink('sub/x.txt', '/var/outputs/bundle/link')\n",
    )
    .input("data", Type::File)
    .input("tree", Type::Dir)
    .output("count", Type::Int)
    .output("names", Type::Json)
    .output("report", Type::File)
    .output("bundle", Type::Dir)
    .build()
    .unwrap();
    let mut out = client
        .run(
            &sb,
            [("data", Value::file(&data)), ("tree", Value::dir(&tree))],
        )
        .await
        .unwrap();
    assert_eq!(out.get::<i64>("count").unwrap(), 2);
    assert_eq!(
        out.get::<serde_json::Value>("names").unwrap(),
        serde_json::json!(["nested/deep.txt", "top.txt"])
    );
    let report: PathBuf = out.get("report").unwrap();
    assert_eq!(std::fs::read_to_string(&report).unwrap(), "rows=2");
    let bundle: PathBuf = out.get("bundle").unwrap();
    assert_eq!(
        std::fs::read_to_string(bundle.join("sub/x.txt")).unwrap(),
        "deep"
    );
    assert_eq!(
        std::fs::read_to_string(bundle.join("link")).unwrap(),
        "deep"
    );

    // Dropped results remove their files; kept ones stay.
    let dir = out.outputs.dir().unwrap().to_path_buf();
    let kept = out.outputs.keep().unwrap();
    drop(out);
    assert!(kept.join("report").exists());
    std::fs::remove_dir_all(&kept).unwrap();
    let out = client
        .run(
            &sb,
            [("data", Value::file(&data)), ("tree", Value::dir(&tree))],
        )
        .await
        .unwrap();
    let dir2 = out.outputs.dir().unwrap().to_path_buf();
    assert_ne!(dir, dir2);
    drop(out);
    assert!(!dir2.exists());
    common::assert_no_container("files");
}

#[tokio::test]
async fn verbatim_scripts_do_their_own_io() {
    let client = common::client().await;
    let host = tempfile::tempdir().unwrap();
    let json = host.path().join("data.json");
    std::fs::write(&json, r#"{"values": [1, 2, 3, 4, 5]}"#).unwrap();
    let sb = Sandbox::code(
        "etl",
        "import json\n\
         data = json.load(open('/var/inputs/data'))\n\
         open('/var/outputs/total', 'w').write(str(sum(data['values'])))\n\
         print('summed', len(data['values']))\n",
    )
    .verbatim()
    .input("data", Type::File)
    .output("total", Type::Int)
    .build()
    .unwrap();
    let out = client
        .run(&sb, [("data", Value::file(&json))])
        .await
        .unwrap();
    assert_eq!(out.get::<i64>("total").unwrap(), 15);
    assert_eq!(out.stdout.text, "summed 5\n");
}

#[tokio::test]
async fn commands_get_paths_and_substituted_scalars() {
    let client = common::client().await;
    let host = tempfile::tempdir().unwrap();
    let text = host.path().join("text.txt");
    std::fs::write(&text, "line 1\n\nline 2\n").unwrap();
    let sb = Sandbox::command("count", "sh")
        .args([
            "-c",
            "grep -c {{pattern}} {{text}} > /var/outputs/lines; echo counted {{pattern}}",
        ])
        .input("pattern", Type::Str)
        .input("text", Type::File)
        .output("lines", Type::Int)
        .build()
        .unwrap();
    let out = client
        .run(
            &sb,
            [("pattern", Value::from(".")), ("text", Value::file(&text))],
        )
        .await
        .unwrap();
    assert_eq!(out.get::<i64>("lines").unwrap(), 2);
    assert_eq!(out.stdout.text.trim(), "counted .");
    common::assert_no_container("count");
}

#[tokio::test]
async fn python_exceptions_carry_type_message_and_traceback() {
    let client = common::client().await;
    let sb = Sandbox::code("boom", "x = 1\ny = x / 0\n")
        .output("y", Type::Float)
        .build()
        .unwrap();
    match client.run(&sb, dockhand::NO_INPUTS).await {
        Err(Error::NonZeroExit {
            exit_code,
            python: Some(py),
            stderr_tail,
            ..
        }) => {
            assert_eq!(exit_code, 1);
            assert_eq!(py.exception_type, "ZeroDivisionError");
            assert_eq!(py.message, "division by zero");
            assert!(
                py.traceback.contains("File \"main.py\", line 2"),
                "{}",
                py.traceback
            );
            assert!(stderr_tail.contains("ZeroDivisionError"));
        }
        other => panic!("expected NonZeroExit with a Python error, got {other:?}"),
    }
    // Verbatim scripts: the traceback is read from stderr.
    let sb = Sandbox::code("boom-verbatim", "raise ValueError('bad value')\n")
        .verbatim()
        .build()
        .unwrap();
    match client.run(&sb, dockhand::NO_INPUTS).await {
        Err(Error::NonZeroExit {
            python: Some(py), ..
        }) => {
            assert_eq!(
                (py.exception_type.as_str(), py.message.as_str()),
                ("ValueError", "bad value")
            );
            assert!(
                py.traceback.contains("File \"main.py\", line 1"),
                "the script is named as in auto-IO mode: {}",
                py.traceback
            );
        }
        other => panic!("expected NonZeroExit, got {other:?}"),
    }
    // Commands: exit code and stderr.
    let sb = Sandbox::command("fail", "sh")
        .args(["-c", "echo partial; echo oops >&2; exit 7"])
        .build()
        .unwrap();
    match client.run(&sb, dockhand::NO_INPUTS).await {
        Err(Error::NonZeroExit {
            exit_code: 7,
            python: None,
            stderr_tail,
            stdout_tail,
            hint: None,
        }) => {
            assert_eq!(stderr_tail, "oops\n");
            assert_eq!(stdout_tail, "partial\n", "stdout is kept too");
        }
        other => panic!("expected NonZeroExit 7, got {other:?}"),
    }
    for name in ["boom", "boom-verbatim", "fail"] {
        common::assert_no_container(name);
    }
}

#[tokio::test]
async fn output_errors_are_named() {
    let client = common::client().await;
    let none: Vec<(String, Value)> = Vec::new();
    let unassigned = Sandbox::code("unassigned", "reslt = 1")
        .output("result", Type::Int)
        .build()
        .unwrap();
    match client.run(&unassigned, none.clone()).await {
        Err(Error::OutputNotAssigned { name }) => assert_eq!(name, "result"),
        other => panic!("expected OutputNotAssigned, got {other:?}"),
    }
    let wrong_type = Sandbox::code("wrong-type", "result = 'abc'")
        .output("result", Type::Int)
        .build()
        .unwrap();
    match client.run(&wrong_type, none.clone()).await {
        Err(Error::BadOutput {
            name,
            expected,
            got,
        }) => {
            assert_eq!((name.as_str(), expected.as_str()), ("result", "int"));
            assert!(got.contains("abc"), "{got}");
        }
        other => panic!("expected BadOutput, got {other:?}"),
    }
    let missing = Sandbox::code("missing", "print('forgot to write')")
        .verbatim()
        .output("total", Type::Int)
        .build()
        .unwrap();
    match client.run(&missing, none.clone()).await {
        Err(Error::MissingOutput { name }) => assert_eq!(name, "total"),
        other => panic!("expected MissingOutput, got {other:?}"),
    }
    let junk = Sandbox::command("junk", "sh")
        .args(["-c", "echo twelve > /var/outputs/n"])
        .output("n", Type::Int)
        .build()
        .unwrap();
    match client.run(&junk, none.clone()).await {
        Err(Error::BadOutput { name, got, .. }) => {
            assert_eq!((name.as_str(), got.trim()), ("n", "twelve"))
        }
        other => panic!("expected BadOutput, got {other:?}"),
    }
    for name in ["unassigned", "wrong-type", "missing", "junk"] {
        common::assert_no_container(name);
    }
}

#[tokio::test]
async fn bad_inputs_fail_before_any_container() {
    let client = common::client().await;
    let sb = Sandbox::code("typed", "y = x")
        .input("x", Type::Int)
        .output("y", Type::Int)
        .build()
        .unwrap();
    let err = client.run(&sb, [("x", "not a number")]).await.unwrap_err();
    assert!(
        matches!(err, Error::InputType { ref name, .. } if name == "x"),
        "{err}"
    );
    let err = client.run(&sb, dockhand::NO_INPUTS).await.unwrap_err();
    assert!(
        matches!(err, Error::MissingInput { ref name } if name == "x"),
        "{err}"
    );
    let err = client.run(&sb, [("x", 1), ("z", 2)]).await.unwrap_err();
    assert!(
        matches!(err, Error::UnknownInput { ref name, .. } if name == "z"),
        "{err}"
    );
    common::assert_no_container("typed");
}

#[tokio::test]
async fn escaping_output_links_are_refused() {
    let client = common::client().await;
    let none: Vec<(String, Value)> = Vec::new();
    let dir_escape = Sandbox::code("escape-dir", "import os\nos.makedirs('/var/outputs/tree')\nos.symlink('/etc', '/var/outputs/tree/etc')\nos.symlink('../../../..', '/var/outputs/tree/up')")
        .verbatim()
        .output("tree", Type::Dir)
        .build()
        .unwrap();
    let err = client.run(&dir_escape, none.clone()).await.unwrap_err();
    assert!(matches!(err, Error::UnsafeArchivePath { .. }), "{err}");
    let file_link = Sandbox::code(
        "escape-file",
        "import os\nos.symlink('/etc/passwd', '/var/outputs/report')",
    )
    .verbatim()
    .output("report", Type::File)
    .build()
    .unwrap();
    let err = client.run(&file_link, none).await.unwrap_err();
    assert!(matches!(err, Error::UnsafeArchivePath { .. }), "{err}");
    common::assert_no_container("escape-dir");
    common::assert_no_container("escape-file");
}

#[tokio::test]
async fn output_is_capped_and_streamed_live() {
    let client = common::client().await;
    let sb = Sandbox::code(
        "chatty",
        "import sys\nfor i in range(5):\n    print('line', i)\nsys.stderr.write('warn\\n')\nprint('x' * 5000)\n",
    )
    .verbatim()
    .output_limit(100)
    .build()
    .unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let seen = lines.clone();
    let options =
        RunOptions::new().on_output(move |l| seen.lock().unwrap().push((l.stream, l.line)));
    let out = client
        .run_with(&sb, dockhand::NO_INPUTS, options)
        .await
        .unwrap();
    assert!(out.stdout.truncated);
    assert_eq!(out.stdout.text.len(), 100);
    assert!(out.stdout.total_bytes > 5000);
    assert!(!out.stderr.truncated);
    let lines = lines.lock().unwrap();
    let stdout: Vec<&str> = lines
        .iter()
        .filter(|(k, _)| *k == StreamKind::Stdout)
        .map(|(_, l)| l.as_str())
        .collect();
    assert_eq!(
        &stdout[..5],
        ["line 0", "line 1", "line 2", "line 3", "line 4"]
    );
    assert_eq!(
        stdout[5].len(),
        5000,
        "the callback sees whole lines, uncapped"
    );
    assert!(lines.contains(&(StreamKind::Stderr, "warn".to_string())));
}

#[tokio::test]
async fn quick_runs_need_no_declarations_and_mixed_inputs_need_no_conversions() {
    let client = common::client().await;
    let out = client
        .run_code("import random\nprint(6 * 7, random.random() < 1)")
        .await
        .unwrap();
    assert_eq!(out.stdout.text, "42 True\n");
    assert!(!out.cached);
    assert!(
        !client.run_code("print(1)").await.unwrap().cached,
        "one-offs always run"
    );
    let greet = Sandbox::code("greet", "line = f'{name} x{times} {loud}'")
        .input("name", Type::Str)
        .input("times", Type::Int)
        .input("loud", Type::Bool)
        .output("line", Type::Str)
        .build()
        .unwrap();
    let out = client
        .run(
            &greet,
            dockhand::inputs! { name: "web", times: 3, loud: true },
        )
        .await
        .unwrap();
    assert_eq!(out.get::<String>("line").unwrap(), "web x3 True");
}

#[tokio::test]
async fn accepted_exit_codes_succeed_and_report_the_real_code() {
    let client = common::client().await;
    let tests_fail = |accept: bool| {
        let mut b = Sandbox::command("tests-fail", "sh")
            .args(["-c", "echo '1 failed' > /var/outputs/summary; exit 1"])
            .output("summary", Type::Str)
            .cache(dockhand::CacheMode::Disable);
        if accept {
            b = b.accept_exit_codes([1]);
        }
        b.build().unwrap()
    };
    let out = client
        .run(&tests_fail(true), dockhand::NO_INPUTS)
        .await
        .unwrap();
    assert_eq!(out.exit_code, 1);
    assert_eq!(out.get::<String>("summary").unwrap(), "1 failed\n");
    assert!(matches!(
        client.run(&tests_fail(false), dockhand::NO_INPUTS).await,
        Err(Error::NonZeroExit { exit_code: 1, .. })
    ));
}

#[tokio::test]
async fn a_run_that_wants_the_network_is_told_how_to_get_it() {
    let client = common::client().await;
    let fetch = Sandbox::code(
        "offline-fetch",
        "import urllib.request\nurllib.request.urlopen('http://example.com')\n",
    )
    .cache(dockhand::CacheMode::Disable)
    .build()
    .unwrap();
    match client.run(&fetch, dockhand::NO_INPUTS).await {
        Err(e @ Error::NonZeroExit { hint: Some(_), .. }) => {
            assert!(e.to_string().contains(".network(Network::Bridge)"), "{e}")
        }
        other => panic!("expected NonZeroExit with a network hint, got {other:?}"),
    }
}
