//! Code mode against a real container: rules, limits, values, tools, sessions,
//! lifecycle, crashes, the agent loop and cleanup.

mod common;

use common::{code_error, code_host as host_with};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dockhand::codemode::{
    run_agent, CodeError, CodeGenerator, CodeHost, CodeHostConfig, CodePolicy, ParamType, State,
    Tool, Toolset,
};
use dockhand::Error;
use serde_json::{json, Value};

async fn host() -> CodeHost {
    host_with(CodeHostConfig::default()).await
}

fn no_tools() -> Toolset {
    Toolset::new()
}

async fn strict_host(config: CodeHostConfig) -> CodeHost {
    host_with(config.policy(CodePolicy::Strict)).await
}

#[tokio::test]
async fn every_strict_rule_rejects_with_line_and_column() {
    let host = strict_host(CodeHostConfig::default()).await;
    let long_literal = format!("s = 'a' * 3\nt = '{}'", "x".repeat(10_001));
    let cases = [
        ("import os", "import"),
        ("x = 1\nfrom subprocess import run", "import"),
        ("import pathlib", "import"),
        ("().__class__", "dunder"),
        ("__builtins__", "dunder"),
        ("x = [].__class__.__subclasses__()", "dunder"),
        ("eval('1')", "builtin"),
        ("exec('x = 1')", "builtin"),
        ("compile('1', 'f', 'eval')", "builtin"),
        ("open('/etc/passwd')", "builtin"),
        ("input()", "builtin"),
        ("breakpoint()", "builtin"),
        ("__import__('os')", "dunder"),
        ("_dh_loop = 1", "reserved"),
        (long_literal.as_str(), "literal_size"),
        ("'{0.__class__}'.format(1)", "dunder"),
        ("x = (", "syntax"),
        ("break", "syntax"),
        ("def f(a, a):\n    pass", "syntax"),
    ];
    for (code, rule) in cases {
        match code_error(host.execute(code, json!({}), &no_tools()).await) {
            CodeError::Validation {
                rule: got,
                line,
                col,
                ..
            } => {
                assert_eq!(got, rule, "for {code:?}");
                assert!(line >= 1 && col >= 1, "for {code:?}: line {line} col {col}");
            }
            other => panic!("{code:?} gave {other:?}"),
        }
    }
    // Where on the line: `os` import on line 2, column 1.
    match code_error(
        host.execute("y = 2\nimport os", json!({}), &no_tools())
            .await,
    ) {
        CodeError::Validation { line, col, .. } => assert_eq!((line, col), (2, 1)),
        other => panic!("{other:?}"),
    }
    // Allowed constructs pass: classes with special methods, type(), the
    // preloaded modules, datetime formatting, imports of offered modules.
    let ok = "def f(a, b=2):\n    return a * b\nclass P:\n    def __init__(self, w):\n        self.w = w\n    def area(self):\n        return self.w * self.w\n\
              d = defaultdict(list)\nd['a'].append(math.sqrt(16))\nc = Counter('aab')\n\
              m = re.match(r'(\\d+)', '42x')\nt = datetime.date(2024, 1, 2).isoformat()\n\
              from itertools import chain\ntry:\n    1 / 0\nexcept ZeroDivisionError:\n    z = 'caught'\n\
              dt = datetime.datetime(2024, 5, 6)\n\
              [f(3), P(3).area(), d['a'][0], c['a'], int(m.group(1)), t, list(chain([1], [2])), z, json.dumps([1]), isinstance(1, int), type(1) is int, f'{dt:%Y}', dt.strftime('%m/%d')]";
    let run = host
        .execute(ok, json!({}), &no_tools())
        .await
        .expect("allowed code runs");
    assert_eq!(
        run.value,
        json!([
            6,
            9,
            4.0,
            2,
            42,
            "2024-01-02",
            [1, 2],
            "caught",
            "[1]",
            true,
            true,
            "2024",
            "05/06"
        ])
    );
    host.close().await.unwrap();
}

#[tokio::test]
async fn last_expression_values_of_every_json_type_and_inputs() {
    let host = host().await;
    let cases = [
        ("1 + 1", json!(2)),
        ("2.5", json!(2.5)),
        ("'text'", json!("text")),
        ("True", json!(true)),
        ("None", Value::Null),
        ("[1, [2, 'x']]", json!([1, [2, "x"]])),
        ("{'a': {'b': 1}}", json!({"a": {"b": 1}})),
        ("x = 1", Value::Null),
        ("(1, 2)", json!([1, 2])),
    ];
    for (code, expected) in cases {
        let run = host.execute(code, json!({}), &no_tools()).await.unwrap();
        assert_eq!(run.value, expected, "for {code:?}");
    }
    let run = host
        .execute(
            "total = sum(r['n'] for r in rows)\n{'total': total * factor, 'name': name}",
            json!({"rows": [{"n": 1}, {"n": 2}], "factor": 10, "name": "x"}),
            &no_tools(),
        )
        .await
        .unwrap();
    assert_eq!(run.value, json!({"total": 30, "name": "x"}));
    let bad = host.execute("1", json!({"__x": 1}), &no_tools()).await;
    assert!(matches!(bad, Err(Error::InvalidSpec { .. })));
    host.close().await.unwrap();
}

#[tokio::test]
async fn loop_guard_time_memory_and_print_limits() {
    let config = CodeHostConfig::new()
        .timeout(Duration::from_secs(2))
        .exec_memory(256u64 << 20)
        .print_limit(100);
    let host = strict_host(config).await;
    assert!(matches!(
        code_error(
            host.execute("while True:\n    pass", json!({}), &no_tools())
                .await
        ),
        CodeError::LoopLimit { line: 1, .. }
    ));
    assert!(matches!(
        code_error(
            host.execute("[i for i in range(20000)]", json!({}), &no_tools())
                .await
        ),
        CodeError::LoopLimit { .. }
    ));
    // 9,999 iterations are fine; nested loops count per loop.
    let run = host
        .execute(
            "n = 0\nfor i in range(100):\n    for j in range(99):\n        n += 1\nn",
            json!({}),
            &no_tools(),
        )
        .await
        .unwrap();
    assert_eq!(run.value, json!(9900));

    let started = Instant::now();
    let err = code_error(
        host.execute(
            "n = 0\nfor i in range(9999):\n    for j in range(9999):\n        n += 1",
            json!({}),
            &no_tools(),
        )
        .await,
    );
    assert_eq!(
        err,
        CodeError::Timeout {
            limit: Duration::from_secs(2)
        }
    );
    // Generous: it only tells a timeout from a run to the end (minutes).
    assert!(started.elapsed() < Duration::from_secs(30));

    let err = code_error(
        host.execute("x = 'a' * (1024 * 1024 * 1024)", json!({}), &no_tools())
            .await,
    );
    assert!(matches!(err, CodeError::MemoryLimit { .. }), "{err:?}");

    let run = host
        .execute(
            "for i in range(10):\n    print('line', i, 'x' * 20)\n'done'",
            json!({}),
            &no_tools(),
        )
        .await
        .unwrap();
    assert!(run.stdout_truncated);
    assert_eq!(run.stdout.chars().count(), 100);
    assert!(run.stdout.starts_with("line 0 "));
    assert_eq!(run.value, json!("done"));

    let err = code_error(host.execute("y = 2\nx = y/0", json!({}), &no_tools()).await);
    assert!(
        matches!(
            err,
            CodeError::Runtime { ref exception_type, line: 2, col: 5, .. } if exception_type == "ZeroDivisionError"
        ),
        "{err:?}"
    );
    // The host is still healthy after all that.
    assert_eq!(host.state(), State::Idle);
    assert_eq!(
        host.execute("'still here'", json!({}), &no_tools())
            .await
            .unwrap()
            .value,
        json!("still here")
    );
    host.close().await.unwrap();
}

fn sleepy_tool(calls: Arc<AtomicUsize>) -> Tool {
    Tool::new("slow_echo", "Waits 50 ms, then returns its argument.")
        .param("value", ParamType::Any, "anything")
        .handler(move |args| {
            let calls = calls.clone();
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok(args["value"].clone())
            }
        })
}

fn failing_tool() -> Tool {
    Tool::new("explode", "Always fails.")
        .handler(|_| async { Err("the tool broke: disk full".to_string()) })
}

#[tokio::test]
async fn tools_sync_awaited_gathered_and_failing() {
    let host = host().await;
    let calls = Arc::new(AtomicUsize::new(0));
    let add = Tool::new("add", "Adds.")
        .param("a", ParamType::Int, "")
        .param("b", ParamType::Int, "")
        .handler(|args| async move {
            Ok(json!(
                args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0)
            ))
        });
    let tools = Toolset::new()
        .tool(add)
        .tool(sleepy_tool(calls.clone()))
        .tool(failing_tool());

    let run = host
        .execute(
            "x = add(1, 2)\ny = await add(a=x, b=10)\n[x, y]",
            json!({}),
            &tools,
        )
        .await
        .unwrap();
    assert_eq!(run.value, json!([3, 13]));
    assert_eq!(run.tool_calls.len(), 2);
    assert_eq!(run.tool_calls[1].args, json!({"a": 3, "b": 10}));
    assert!(run.tool_calls.iter().all(|c| c.ok));

    // 20 gathered calls of a 50 ms tool take about 50 ms, not a second.
    let started = Instant::now();
    let run = host
        .execute(
            "rs = await gather(*[slow_echo(i) for i in range(20)])\nsum(rs)",
            json!({}),
            &tools,
        )
        .await
        .unwrap();
    let elapsed = started.elapsed();
    assert_eq!(run.value, json!(190));
    assert_eq!(calls.load(Ordering::SeqCst), 20);
    assert!(
        elapsed < Duration::from_millis(600),
        "gathered calls took {elapsed:?}: not concurrent"
    );
    let run = host
        .execute(
            "a, b = await asyncio.gather(slow_echo('a'), slow_echo('b'))\na + b",
            json!({}),
            &tools,
        )
        .await
        .unwrap();
    assert_eq!(run.value, json!("ab"));

    // A tool error is a catchable exception with the tool's message...
    let run = host
        .execute(
            "try:\n    explode()\n    r = 'no'\nexcept ToolError as e:\n    r = str(e)\nr",
            json!({}),
            &tools,
        )
        .await
        .unwrap();
    assert_eq!(run.value, json!("the tool broke: disk full"));
    assert!(!run.tool_calls[0].ok);
    // ...and an uncaught one fails the execution.
    let err = code_error(host.execute("explode()", json!({}), &tools).await);
    assert!(
        matches!(err, CodeError::Tool { ref message, line: 1 } if message.contains("disk full")),
        "{err:?}"
    );
    // Arguments are checked against the schema before the handler runs.
    let err = code_error(host.execute("add('one', 2)", json!({}), &tools).await);
    assert!(
        matches!(err, CodeError::Tool { ref message, .. } if message.contains("should be integer")),
        "{err:?}"
    );
    let err = code_error(host.execute("missing_tool(1)", json!({}), &tools).await);
    assert!(
        matches!(err, CodeError::Runtime { ref exception_type, .. } if exception_type == "NameError"),
        "{err:?}"
    );
    host.close().await.unwrap();
}

#[tokio::test]
async fn sessions_keep_state_and_executions_do_not() {
    let host = host().await;
    host.execute("leak = 42", json!({}), &no_tools())
        .await
        .unwrap();
    let err = code_error(host.execute("leak", json!({}), &no_tools()).await);
    assert!(
        matches!(err, CodeError::Runtime { ref exception_type, .. } if exception_type == "NameError")
    );

    let session = host.session();
    session
        .execute(
            "total = 1\ndef bump(n):\n    return n + 1",
            json!({}),
            &no_tools(),
        )
        .await
        .unwrap();
    session
        .execute("total = bump(total)", json!({}), &no_tools())
        .await
        .unwrap();
    assert_eq!(
        session
            .execute("total", json!({}), &no_tools())
            .await
            .unwrap()
            .value,
        json!(2)
    );
    let other = host.session();
    assert!(other
        .execute("total", json!({}), &no_tools())
        .await
        .is_err());
    session.clone().close().await.unwrap();
    assert!(
        session
            .execute("total", json!({}), &no_tools())
            .await
            .is_err(),
        "a closed session starts afresh"
    );
    host.close().await.unwrap();
}

#[tokio::test]
async fn lifecycle_transitions_restart_and_close() {
    let client = common::client().await;
    let host = client.code_host(CodeHostConfig::default());
    assert_eq!(host.state(), State::Init);
    assert!(
        matches!(host.stop().await, Err(Error::InvalidTransition { .. })),
        "init -> error is not a transition"
    );
    host.start().await.unwrap();
    assert_eq!(host.state(), State::Idle);
    assert!(
        matches!(host.start().await, Err(Error::InvalidTransition { .. })),
        "idle -> running by start is refused"
    );
    let d = host.describe();
    assert!(d.container_id.is_some());
    assert_eq!(d.executions, 0);

    host.execute("1", json!({}), &no_tools()).await.unwrap();
    assert_eq!(host.describe().executions, 1);

    // stop: the container goes, the host can start again.
    host.stop().await.unwrap();
    assert_eq!(host.state(), State::Error);
    assert_eq!(host.describe().last_error.as_deref(), Some("stopped"));
    assert!(host.execute("1", json!({}), &no_tools()).await.is_err());
    host.start().await.unwrap();
    assert_eq!(
        host.execute("2", json!({}), &no_tools())
            .await
            .unwrap()
            .value,
        json!(2)
    );

    // The runner dies: the host goes to error, and start brings it back.
    let id = host.describe().container_id.unwrap();
    let killed = std::process::Command::new("docker")
        .args(["kill", &id])
        .output()
        .unwrap();
    assert!(killed.status.success());
    let err = code_error(host.execute("3", json!({}), &no_tools()).await);
    assert!(matches!(err, CodeError::Crashed { .. }), "{err:?}");
    assert_eq!(host.state(), State::Error);
    host.start().await.unwrap();
    assert_eq!(
        host.execute("4", json!({}), &no_tools())
            .await
            .unwrap()
            .value,
        json!(4)
    );

    host.close().await.unwrap();
    assert_eq!(host.state(), State::Closed);
    assert!(matches!(
        host.start().await,
        Err(Error::InvalidTransition { .. })
    ));
    assert!(matches!(
        host.close().await,
        Err(Error::InvalidTransition { .. })
    ));
    assert_eq!(
        common::containers_with_label(&format!("dev.dockhand.kind=code-host,id={id}")),
        0
    );
}

/// A generator that writes broken code first, then fixes it from the feedback.
struct Scripted {
    answers: Vec<&'static str>,
    feedback_seen: Vec<Option<String>>,
}

impl CodeGenerator for Scripted {
    async fn generate(&mut self, _task: &str, feedback: Option<&str>) -> dockhand::Result<String> {
        self.feedback_seen.push(feedback.map(String::from));
        Ok(self.answers.remove(0).to_string())
    }
}

#[tokio::test]
async fn agent_loop_feeds_the_error_back_and_retries() {
    let host = strict_host(CodeHostConfig::default()).await;
    let mut generator = Scripted {
        answers: vec![
            "import statistics\nstatistics.mean(xs)",
            "sum(xs) / len(xs)",
        ],
        feedback_seen: vec![],
    };
    let outcome = run_agent(
        &host,
        &mut generator,
        "mean of xs",
        json!({"xs": [1, 2, 3]}),
        &no_tools(),
        2,
    )
    .await
    .unwrap();
    assert_eq!(outcome.execution.value, json!(2.0));
    assert_eq!(outcome.turns.len(), 2);
    assert!(generator.feedback_seen[0].is_none());
    let fed = generator.feedback_seen[1].as_deref().unwrap();
    assert!(fed.contains("ValidationError (import) at line 1"), "{fed}");

    let mut stubborn = Scripted {
        answers: vec!["1/0", "1/0"],
        feedback_seen: vec![],
    };
    let err = run_agent(&host, &mut stubborn, "t", json!({}), &no_tools(), 1)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Code(_)));
    assert_eq!(stubborn.feedback_seen.len(), 2);
    host.close().await.unwrap();
}

#[tokio::test]
async fn dropping_a_host_removes_its_container() {
    let host = host().await;
    let id = host.describe().container_id.unwrap();
    drop(host);
    // On a current-thread runtime the removal finishes on its own thread.
    common::wait_gone(&id).await;
}

/// A bad setting fails `start` with `InvalidSpec` and leaves the host in
/// `init`, startable once the setting is fixed; nothing is created.
#[tokio::test]
async fn bad_settings_fail_the_start_and_leave_the_host_startable() {
    let client = common::client().await;
    let host = client.code_host(CodeHostConfig::new().memory("64Mi").exec_memory("1Gi"));
    match host.start().await {
        Err(e @ Error::InvalidSpec { .. }) => {
            assert!(e.to_string().contains("more than the container"), "{e}")
        }
        other => panic!("expected InvalidSpec, got {other:?}"),
    }
    assert_eq!(host.state(), State::Init);
    assert_eq!(host.describe().container_id, None);
}
