//! Code mode: a gather over a comprehension of calls of one tool fans out
//! (one suspension of the interpreter for all the calls). It must mean just
//! what the calls one by one mean: the same values in order, the same errors
//! where the gather is, the same limits, and names the code binds keep
//! their meaning. Each case checks the next execution is unaffected.

mod common;

use common::{code_error, code_host};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dockhand::codemode::{CodeError, CodeHost, CodeHostConfig, ParamType, State, Tool, Toolset};
use serde_json::{json, Value};

/// `echo(value)` returns its value and counts its calls; `flaky(n)` fails
/// for 3; `nap(ms)` sleeps.
fn tools(calls: &Arc<AtomicUsize>) -> Toolset {
    let echoed = calls.clone();
    let failed = calls.clone();
    Toolset::new()
        .tool(
            Tool::new("echo", "Returns its value.")
                .param("value", ParamType::Any, "anything")
                .handler(move |args| {
                    echoed.fetch_add(1, Ordering::SeqCst);
                    async move { Ok(args["value"].clone()) }
                }),
        )
        .tool(
            Tool::new("flaky", "Fails for 3.")
                .param("n", ParamType::Int, "a number")
                .handler(move |args| {
                    failed.fetch_add(1, Ordering::SeqCst);
                    async move {
                        match args["n"].as_i64() {
                            Some(3) => Err("three is unlucky".to_string()),
                            n => Ok(json!(n)),
                        }
                    }
                }),
        )
        .tool(
            Tool::new("nap", "Sleeps ms milliseconds.")
                .param("ms", ParamType::Int, "")
                .handler(|args| async move {
                    let ms = args["ms"].as_u64().unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok(json!(ms))
                }),
        )
}

async fn assert_healthy(host: &CodeHost, tools: &Toolset) {
    let run = host
        .execute(
            "rs = await gather(*[echo(k + i) for i in range(3)])\nrs",
            json!({"k": 40}),
            tools,
        )
        .await
        .unwrap_or_else(|e| panic!("the next execution failed: {e}"));
    assert_eq!(run.value, json!([40, 41, 42]));
    assert_eq!(host.state(), State::Idle);
}

#[tokio::test]
async fn fanned_out_calls_give_their_values_in_order_as_calls_one_by_one_do() {
    let host = code_host(CodeHostConfig::new()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let tools = tools(&calls);
    let code = "import asyncio\n\
                a = await gather(*[echo({'i': i, 's': str(i) * 2}) for i in range(60)])\n\
                b = await asyncio.gather(*(echo(value=x) for x in ['x', None, 1.5] if x != 'y'))\n\
                [a[0], a[59], len(a), b]";
    let run = host.execute(code, json!({}), &tools).await.unwrap();
    let expected = json!([{"i": 0, "s": "00"}, {"i": 59, "s": "5959"}, 60, ["x", null, 1.5]]);
    assert_eq!(run.value, expected);
    assert_eq!(calls.load(Ordering::SeqCst), 63);
    assert_eq!(run.tool_calls.len(), 63);
    let mut seen: Vec<i64> = run
        .tool_calls
        .iter()
        .filter_map(|c| c.args["value"]["i"].as_i64())
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..60).collect::<Vec<_>>());

    // A REPL session takes the call-by-call path: the same values.
    let session = host.session();
    let again = session.execute(code, json!({}), &tools).await.unwrap();
    assert_eq!(again.value, expected);
    assert_healthy(&host, &tools).await;
    host.close().await.unwrap();
}

#[tokio::test]
async fn a_failing_call_raises_where_the_gather_is_and_can_be_caught() {
    let host = code_host(CodeHostConfig::new()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let tools = tools(&calls);
    let caught = host
        .execute(
            "try:\n    await gather(*[flaky(i) for i in range(6)])\nexcept Exception as e:\n    print('caught:', e)\n'after'",
            json!({}),
            &tools,
        )
        .await
        .unwrap();
    assert_eq!(caught.value, json!("after"));
    assert!(
        caught.stdout.contains("caught: three is unlucky"),
        "{}",
        caught.stdout
    );
    let err = code_error(
        host.execute(
            "x = 1\nrs = await gather(*[flaky(i) for i in range(6)])",
            json!({}),
            &tools,
        )
        .await,
    );
    assert!(
        matches!(&err, CodeError::Tool { message, line: 2 } if message.contains("three is unlucky")),
        "{err:?}"
    );
    assert_healthy(&host, &tools).await;
    host.close().await.unwrap();
}

#[tokio::test]
async fn bad_arguments_fail_typed_and_no_call_goes_out_for_values_that_are_not_json() {
    let host = code_host(CodeHostConfig::new()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let tools = tools(&calls);
    // The fifth call's argument is bytes: nothing reaches the host.
    let err = code_error(
        host.execute(
            "rs = await gather(*[echo(b'x' if i == 4 else i) for i in range(8)])",
            json!({}),
            &tools,
        )
        .await,
    );
    assert!(
        matches!(&err, CodeError::Tool { message, line: 1 } if message.contains("bytes")),
        "{err:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // Arguments of the wrong type are refused by the tool's schema, by name.
    let err = code_error(
        host.execute(
            "await gather(*[flaky(str(i)) for i in range(3)])",
            json!({}),
            &tools,
        )
        .await,
    );
    assert!(
        matches!(&err, CodeError::Tool { message, .. } if message.contains("`n`")),
        "{err:?}"
    );
    // An argument that raises while the calls are built raises as it would.
    let err = code_error(
        host.execute(
            "await gather(*[echo(1 // (2 - i)) for i in range(4)])",
            json!({}),
            &tools,
        )
        .await,
    );
    assert!(
        matches!(&err, CodeError::Runtime { exception_type, line: 1, col: 21, .. } if exception_type == "ZeroDivisionError"),
        "{err:?}"
    );
    assert_healthy(&host, &tools).await;
    host.close().await.unwrap();
}

#[tokio::test]
async fn names_the_code_binds_keep_their_meaning() {
    let host = code_host(CodeHostConfig::new()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let tools = tools(&calls);
    let run = host
        .execute(
            "async def echo(v):\n    return -v\nawait gather(*[echo(i) for i in range(3)])",
            json!({}),
            &tools,
        )
        .await
        .unwrap();
    assert_eq!(run.value, json!([0, -1, -2]));
    let run = host
        .execute(
            "async def twice(*xs):\n    out = []\n    for x in xs:\n        out.append(await x)\n    return out * 2\ngather = twice\nawait gather(*[echo(i) for i in range(2)])",
            json!({}),
            &tools,
        )
        .await
        .unwrap();
    assert_eq!(run.value, json!([0, 1, 0, 1]));
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "only the second ran the tool"
    );
    assert_healthy(&host, &tools).await;
    host.close().await.unwrap();
}

#[tokio::test]
async fn every_fanned_out_call_counts_against_the_call_limit() {
    let host = code_host(CodeHostConfig::new().max_tool_calls(10)).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let tools = tools(&calls);
    let run = host
        .execute(
            "len(await gather(*[echo(i) for i in range(10)]))",
            json!({}),
            &tools,
        )
        .await
        .unwrap();
    assert_eq!(run.value, json!(10));
    calls.store(0, Ordering::SeqCst);
    let err = code_error(
        host.execute(
            "await gather(*[echo(i) for i in range(11)])",
            json!({}),
            &tools,
        )
        .await,
    );
    assert!(matches!(err, CodeError::ToolLimit { .. }), "{err:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 0, "none of the 11 went out");
    assert_healthy(&host, &tools).await;
    host.close().await.unwrap();
}

#[tokio::test]
async fn dropping_an_execution_waiting_on_a_fan_out_leaves_the_host_usable() {
    let host = code_host(CodeHostConfig::new()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let tools = tools(&calls);
    let waiting = host.execute(
        "await gather(*[nap(2000) for i in range(20)])",
        json!({}),
        &tools,
    );
    let dropped = tokio::time::timeout(Duration::from_millis(300), waiting).await;
    assert!(dropped.is_err(), "the execution should still be waiting");
    assert_healthy(&host, &tools).await;
    let value: Value = host
        .execute(
            "sum(await gather(*[nap(i) for i in range(5)]))",
            json!({}),
            &tools,
        )
        .await
        .unwrap()
        .value;
    assert_eq!(value, json!(10));
    host.close().await.unwrap();
}

#[tokio::test]
async fn the_fan_out_helpers_are_out_of_the_codes_reach() {
    let host = code_host(CodeHostConfig::new()).await;
    let calls = Arc::new(AtomicUsize::new(0));
    let tools = tools(&calls);
    for code in [
        "await _dh_fanout([('echo', ((1,), {}))])",
        "await _dh_fan(gather)(('echo', _dh_args(1)))",
        "f = _dh_args\nf(1)",
    ] {
        let err = code_error(host.execute(code, json!({}), &tools).await);
        assert!(
            matches!(&err, CodeError::Validation { rule, .. } if rule == "reserved"),
            "{code}: {err:?}"
        );
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    assert_healthy(&host, &tools).await;
    host.close().await.unwrap();
}
