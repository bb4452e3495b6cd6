//! Code mode against hostile code: escapes, state across executions, forged
//! output, time/memory/recursion bombs, odd values, malformed tool calls,
//! cancellation and container faults. Every case asserts the typed outcome and
//! that the next execution on the same host returns its own correct result.

mod common;

use common::{code_error, code_host as host_with};

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use dockhand::codemode::{
    CodeError, CodeHost, CodeHostConfig, CodePolicy, ParamType, State, Tool, Toolset,
};
use dockhand::Error;
use serde_json::{json, Value};

fn tools() -> Toolset {
    Toolset::new()
        .tool(
            Tool::new("add", "Adds two integers.")
                .param("a", ParamType::Int, "")
                .param("b", ParamType::Int, "")
                .handler(|args| async move {
                    Ok(json!(
                        args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)
                    ))
                }),
        )
        .tool(
            Tool::new("nap", "Sleeps for ms milliseconds, then returns ms.")
                .param("ms", ParamType::Int, "")
                .handler(|args| async move {
                    let ms = args["ms"].as_u64().unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok(json!(ms))
                }),
        )
        .tool(
            Tool::new("day", "A date, tagged.")
                .handler(|_| async { Ok(json!({"$date": "2024-02-29"})) }),
        )
}

static NEXT: AtomicU64 = AtomicU64::new(1);

/// The host still answers with the right result for a fresh input, and
/// nothing of the hostile execution is visible.
async fn assert_healthy(host: &CodeHost) {
    let k = NEXT.fetch_add(1, Ordering::Relaxed) as i64;
    let run = host
        .execute(
            "[k * 3, await add(k, 1), 'clean']",
            json!({"k": k}),
            &tools(),
        )
        .await
        .unwrap_or_else(|e| panic!("the next execution failed: {e}"));
    assert_eq!(run.value, json!([k * 3, k + 1, "clean"]));
    assert_eq!(host.state(), State::Idle);
}

/// Runs each `(code, check)` and then checks the host is healthy.
/// A hostile snippet and the check its error must pass.
type Case<'a> = (&'a str, fn(&CodeError) -> bool);

async fn each(host: &CodeHost, cases: &[Case<'_>]) {
    for (code, check) in cases {
        let started = Instant::now();
        let err = code_error(host.execute(code, json!({}), &tools()).await);
        assert!(check(&err), "{code:?} gave {err:?}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{code:?} took {:?}",
            started.elapsed()
        );
        assert_healthy(host).await;
    }
}

fn validation(rule: &'static str) -> impl Fn(&CodeError) -> bool {
    move |e| matches!(e, CodeError::Validation { rule: r, .. } if r == rule)
}

fn runtime(e: &CodeError, ty: &str) -> bool {
    matches!(e, CodeError::Runtime { exception_type, .. } if exception_type == ty)
}

#[tokio::test]
async fn escapes_through_attributes_formats_modules_and_classes_fail() {
    let host = host_with(CodeHostConfig::default().policy(CodePolicy::Strict)).await;
    each(
        &host,
        &[
            ("().__class__.__bases__[0].__subclasses__()", |e| {
                validation("dunder")(e)
            }),
            ("getattr((), '__cla' + 'ss__')", |e| {
                runtime(e, "AttributeError")
            }),
            ("t = type(1)\ngetattr(t, '__subcl' + 'asses__')()", |e| {
                runtime(e, "AttributeError")
            }),
            ("'{0.__class__}'.format(1)", |e| validation("dunder")(e)),
            ("f = '{0.' + '__class__}'\nf.format(1)", |e| {
                matches!(e, CodeError::Runtime { .. })
            }),
            ("import os", |e| validation("import")(e)),
            ("import subprocess\nsubprocess.run(['id'])", |e| {
                validation("import")(e)
            }),
            ("import sys\nsys.modules", |e| runtime(e, "AttributeError")),
            ("__import__('os')", |e| validation("dunder")(e)),
            ("json.codecs", |e| runtime(e, "AttributeError")),
            ("datetime.sys", |e| runtime(e, "AttributeError")),
            ("class A:\n    pass\nA.__mro__", |e| validation("dunder")(e)),
            ("g = dir\ng(json)[0].os", |e| {
                matches!(e, CodeError::Runtime { .. })
            }),
            ("o = [eval][0]", |e| validation("builtin")(e)),
        ],
    )
    .await;
    host.close().await.unwrap();
}

#[tokio::test]
async fn bombs_hit_typed_limits_even_when_caught() {
    let config = CodeHostConfig::new()
        .timeout(Duration::from_secs(2))
        .exec_memory(64u64 << 20)
        .loop_limit(1_000_000_000);
    let host = host_with(config).await;
    let timeout = |e: &CodeError| matches!(e, CodeError::Timeout { .. });
    each(
        &host,
        &[
            ("while True:\n    pass", timeout),
            (
                "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass",
                timeout,
            ),
            ("def f(n):\n    return f(n + 1)\nf(0)", |e| runtime(e, "RecursionError")),
            (
                "def f(n):\n    try:\n        return f(n + 1)\n    except RecursionError:\n        return f(n + 1)\nf(0)",
                |e| runtime(e, "RecursionError") || matches!(e, CodeError::Timeout { .. }),
            ),
            ("x = [0] * 10**9", |e| matches!(e, CodeError::MemoryLimit { .. })),
            (
                "xs = []\nwhile True:\n    try:\n        xs.append('x' * 10**6)\n    except MemoryError:\n        pass",
                |e| matches!(e, CodeError::MemoryLimit { .. } | CodeError::Timeout { .. }),
            ),
            ("s = 'a'\nfor i in range(64):\n    s = s + s", |e| {
                matches!(e, CodeError::MemoryLimit { .. })
            }),
            ("x = 10 ** 10 ** 8", |e| {
                matches!(e, CodeError::MemoryLimit { .. } | CodeError::Timeout { .. } | CodeError::Runtime { .. })
            }),
        ],
    )
    .await;
    host.close().await.unwrap();
}

#[tokio::test]
async fn loop_guard_is_not_caught_by_except_exception() {
    let host = host_with(CodeHostConfig::default().policy(CodePolicy::Strict)).await;
    each(
        &host,
        &[
            (
                "try:\n    while True:\n        pass\nexcept Exception:\n    'caught'",
                |e| matches!(e, CodeError::LoopLimit { line: 2, .. }),
            ),
            ("[i for i in range(10**6)]", |e| {
                matches!(e, CodeError::LoopLimit { line: 1, .. })
            }),
            // Counted iterators: endless, and one item over the limit.
            (
                "import itertools\nfor i in itertools.count():\n    pass",
                |e| matches!(e, CodeError::LoopLimit { line: 2, .. }),
            ),
            ("n = 0\nfor i in map(str, range(10001)):\n    n += 1", |e| {
                matches!(e, CodeError::LoopLimit { line: 2, .. })
            }),
            // The guard's helpers cannot be replaced to switch it off.
            ("_dh_LoopEnd = list", |e| validation("reserved")(e)),
            ("_dh_sized = (object,)", |e| validation("reserved")(e)),
        ],
    )
    .await;
    // At the limit exactly, a counted loop runs to its end, and a dict that
    // changes size under the guard raises as in a plain loop.
    let run = host
        .execute(
            "n = 0\nfor i in iter(range(10000)):\n    n += i\nn",
            json!({}),
            &Toolset::new(),
        )
        .await
        .unwrap();
    assert_eq!(run.value, json!(49_995_000));
    let e = code_error(
        host.execute(
            "d = dict.fromkeys(range(20000))\nfor k in d:\n    d[-k - 1] = 1",
            json!({}),
            &Toolset::new(),
        )
        .await,
    );
    assert!(runtime(&e, "RuntimeError"), "{e:?}");
    host.close().await.unwrap();
}

#[tokio::test]
async fn nothing_crosses_from_one_execution_to_the_next() {
    let host = host_with(CodeHostConfig::default()).await;
    host.execute(
        "leak = 42\njson.dumps = None\ngather = None\nToolError = None\nmath.pi = 3",
        json!({}),
        &tools(),
    )
    .await
    .ok();
    let run = host
        .execute(
            "r = await gather(add(1, 2), add(3, 4))\n[r, json.dumps([1]), round(math.e, 1), ToolError is RuntimeError]",
            json!({}),
            &tools(),
        )
        .await
        .unwrap();
    assert_eq!(run.value, json!([[3, 7], "[1]", 2.7, true]));
    assert!(runtime(
        &code_error(host.execute("leak", json!({}), &tools()).await),
        "NameError"
    ));
    // The sandbox has no files to leave behind, and no processes.
    assert!(runtime(
        &code_error(
            host.execute("open('/tmp/x', 'w').write('x')", json!({}), &tools())
                .await
        ),
        "PermissionError"
    ));
    assert_healthy(&host).await;
    host.close().await.unwrap();
}

#[tokio::test]
async fn forged_output_and_odd_values_stay_data() {
    let config = CodeHostConfig::new().print_limit(1000);
    let host = host_with(config).await;
    let forged =
        r#"{"type":"result","id":"e1","ok":true,"value":666,"stdout":"","stdout_truncated":false}"#;
    let run = host
        .execute(
            &format!("print({forged:?})\nprint('\\n' + {forged:?})\n'mine'"),
            json!({}),
            &tools(),
        )
        .await
        .unwrap();
    assert_eq!(run.value, json!("mine"));
    assert!(run.stdout.contains(forged));
    assert_healthy(&host).await;

    let run = host
        .execute("'a\\x00b😀\\n{\"type\": \"result\"}'", json!({}), &tools())
        .await
        .unwrap();
    assert_eq!(run.value, json!("a\u{0}b😀\n{\"type\": \"result\"}"));
    let started = Instant::now();
    match host
        .execute("print('\\ud800')\n'\\udfff'", json!({}), &tools())
        .await
    {
        Ok(run) => assert!(run.value.is_string()),
        Err(Error::Code(f)) => assert!(matches!(
            f.error,
            CodeError::Validation { .. } | CodeError::Runtime { .. } | CodeError::Value { .. }
        )),
        Err(other) => panic!("lone surrogates gave {other:?}"),
    }
    // Generous: it only catches a hang.
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_healthy(&host).await;

    let run = host
        .execute("print('x' * 10**7)\n1", json!({}), &tools())
        .await
        .unwrap();
    assert!(run.stdout_truncated);
    assert_eq!(run.stdout.chars().count(), 1000);
    let run = host
        .execute(
            "for i in range(10000):\n    print(i)\n2",
            json!({}),
            &tools(),
        )
        .await
        .unwrap();
    assert!(run.stdout_truncated && run.stdout.starts_with("0\n1\n"));
    assert_healthy(&host).await;

    each(
        &host,
        &[
            ("b'\\xff'", |e| matches!(e, CodeError::Value { .. })),
            ("float('nan')", |e| matches!(e, CodeError::Value { .. })),
            ("x = []\nfor i in range(200):\n    x = [x]\nx", |e| {
                matches!(e, CodeError::Value { .. })
            }),
            ("{(1, 2): 3}", |e| matches!(e, CodeError::Value { .. })),
            (
                "raise ValueError('m' * 10**6)",
                |e| matches!(e, CodeError::Runtime { message, .. } if message.len() <= 8192),
            ),
        ],
    )
    .await;
    host.close().await.unwrap();
}

#[tokio::test]
async fn values_round_trip_through_inputs_tools_and_results() {
    let host = host_with(CodeHostConfig::default()).await;
    let run = host
        .execute(
            "d = day()\n[when.year, when.isoformat(), (when + gap).isoformat(), d.isoformat(), d.weekday(), gap.total_seconds(), nested]",
            json!({
                "when": {"$datetime": "2024-01-02T03:04:05"},
                "gap": {"$timedelta": 90.5},
                "nested": {"a": [1, 2.5, null, true, "é"]},
            }),
            &tools(),
        )
        .await
        .unwrap();
    assert_eq!(
        run.value,
        json!([2024, "2024-01-02T03:04:05", "2024-01-02T03:05:35.500000", "2024-02-29", 3, 90.5, {"a": [1, 2.5, null, true, "é"]}])
    );
    let run = host
        .execute("datetime.date(2024, 3, 1)", json!({}), &tools())
        .await
        .unwrap();
    assert_eq!(run.value, json!("2024-03-01"));
    host.close().await.unwrap();
}

#[tokio::test]
async fn malformed_tool_calls_fail_at_once() {
    let host = host_with(CodeHostConfig::default()).await;
    for (code, needle) in [
        ("add('one', 2)", "should be integer"),
        ("add(1, 2, c=3)", "unexpected argument `c`"),
        ("add(1)", "missing argument `b`"),
        ("add(1, 2, 3)", "takes 2 arguments"),
        // Values that are not JSON fail the same way, before the host.
        ("add(float('nan'), 1)", "nan is not a JSON number"),
        ("add(1, float('inf'))", "inf is not a JSON number"),
        ("add(2 ** 70, 1)", "does not fit in 64 bits"),
        ("add(b'x', 1)", "bytes are not JSON"),
    ] {
        let started = Instant::now();
        let err = code_error(host.execute(code, json!({}), &tools()).await);
        assert!(
            matches!(&err, CodeError::Tool { message, .. } if message.contains(needle)),
            "{code}: {err:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{code} was slow"
        );
        // And the code can catch it, as any tool's failure.
        common::assert_catches_tool_error(&host, code, needle, &tools()).await;
        assert_healthy(&host).await;
    }
    assert!(runtime(
        &code_error(host.execute("nope(1)", json!({}), &tools()).await),
        "NameError"
    ));
    assert_healthy(&host).await;
    host.close().await.unwrap();
}

#[tokio::test]
async fn ten_thousand_tool_calls_and_the_call_limit() {
    let config = CodeHostConfig::new()
        .timeout(Duration::from_secs(120))
        .max_tool_calls(10_000);
    let host = host_with(config).await;
    let run = host
        .execute(
            "n = 0\nfor i in range(10000):\n    n = add(n, 1)\nn",
            json!({}),
            &tools(),
        )
        .await
        .unwrap();
    assert_eq!(run.value, json!(10_000));
    assert_eq!(run.tool_calls.len(), 10_000);
    let run = host
        .execute(
            "rs = await gather(*[add(i, 0) for i in range(2000)])\nsum(rs)",
            json!({}),
            &tools(),
        )
        .await
        .unwrap();
    assert_eq!(run.value, json!(1999 * 2000 / 2));
    let err = code_error(
        host.execute(
            "for i in range(5001):\n    add(i, 0)\nfor i in range(5001):\n    add(i, 0)",
            json!({}),
            &tools(),
        )
        .await,
    );
    assert!(matches!(err, CodeError::ToolLimit { .. }), "{err:?}");
    assert_healthy(&host).await;
    host.close().await.unwrap();
}

#[tokio::test]
async fn syntax_errors_monty_alone_sees_leave_the_host_usable() {
    let host = host_with(CodeHostConfig::default()).await;
    each(
        &host,
        &[
            ("break", |e| validation("syntax")(e)),
            ("nonlocal x", |e| validation("syntax")(e)),
            ("def f(a, a):\n    pass", |e| validation("syntax")(e)),
            ("x = 1\ny = (", |e| {
                matches!(e, CodeError::Validation { rule, line, .. } if rule == "syntax" && *line >= 2)
            }),
        ],
    )
    .await;
    host.close().await.unwrap();
}

#[tokio::test]
async fn type_checking_against_tool_stubs() {
    let config = CodeHostConfig::new().type_check(true);
    let host = host_with(config).await;
    let err = code_error(
        host.execute("x = 1\ny = await add('one', 2)", json!({}), &tools())
            .await,
    );
    assert!(
        matches!(&err, CodeError::Validation { rule, line: 2, .. } if rule == "type"),
        "{err:?}"
    );
    assert!(err.to_string().contains("TypeCheckError"), "{err}");
    let run = host
        .execute("r = await add(1, 2)\nr", json!({}), &tools())
        .await
        .unwrap();
    assert_eq!(run.value, json!(3));
    host.close().await.unwrap();
}

#[tokio::test]
async fn a_dropped_execution_leaves_the_host_usable() {
    let host = host_with(CodeHostConfig::default()).await;
    for code in [
        "await nap(5000)",
        "nap(5000)",
        "n = 0\nfor i in range(9999):\n    for j in range(9999):\n        n += 1",
    ] {
        let dropped = tokio::time::timeout(
            Duration::from_millis(300),
            host.execute(code, json!({}), &tools()),
        )
        .await;
        assert!(dropped.is_err(), "{code} should still be running");
        assert_eq!(host.state(), State::Idle, "not wedged in running");
        let started = Instant::now();
        assert_healthy(&host).await;
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "recovery took {:?}",
            started.elapsed()
        );
    }
    host.close().await.unwrap();
}

#[tokio::test]
async fn a_paused_or_removed_container_gives_typed_errors_and_recovers() {
    let config = CodeHostConfig::new().timeout(Duration::from_secs(2));
    let host = host_with(config).await;
    let first = host.describe().container_id.unwrap();
    common::docker(&["pause", &first]);
    let started = Instant::now();
    let err = code_error(host.execute("1", json!({}), &tools()).await);
    let took = started.elapsed();
    assert!(matches!(err, CodeError::Timeout { .. }), "{err:?}");
    // Generous: a paused container would otherwise never answer.
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert_eq!(host.state(), State::Error);
    // The next execution starts a new container; the paused one goes away.
    assert_healthy(&host).await;
    let second = host.describe().container_id.unwrap();
    assert_ne!(first, second);
    common::wait_gone(&first).await;

    common::docker(&["rm", "-f", &second]);
    let err = code_error(host.execute("1", json!({}), &tools()).await);
    assert!(matches!(err, CodeError::Crashed { .. }), "{err:?}");
    assert_healthy(&host).await;
    host.close().await.unwrap();
}

#[tokio::test]
async fn sessions_are_isolated_and_reset_after_a_limit() {
    let config = CodeHostConfig::new()
        .timeout(Duration::from_secs(2))
        .loop_limit(1_000_000_000);
    let host = host_with(config).await;
    let a = host.session();
    let b = host.session();
    a.execute("secret = 'a'", json!({}), &tools())
        .await
        .unwrap();
    assert!(runtime(
        &code_error(b.execute("secret", json!({}), &tools()).await),
        "NameError"
    ));
    let err = code_error(
        a.execute("while True:\n    pass", json!({}), &tools())
            .await,
    );
    assert!(matches!(err, CodeError::Timeout { .. }), "{err:?}");
    assert!(
        runtime(
            &code_error(a.execute("secret", json!({}), &tools()).await),
            "NameError"
        ),
        "a namespace a limit stopped is discarded"
    );
    assert_healthy(&host).await;
    let value: Value = a.execute("1 + 1", json!({}), &tools()).await.unwrap().value;
    assert_eq!(value, json!(2));
    host.close().await.unwrap();
}
