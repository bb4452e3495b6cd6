//! How tool calls travel between a code host and its bridge: the direct
//! channel (a Unix socket, local daemons only) and the batching of calls the
//! code issues in a row. A test binary of its own: it counts the socket
//! directories on this machine, which other tests running at the same time
//! would change.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{code_error, code_host, new_socket_dirs, socket_dirs};
use dockhand::codemode::{CodeError, CodeHostConfig, CodePolicy, ParamType, Tool, Toolset};
use dockhand::ImageSpec;
use serde_json::json;

/// One test at a time: the first counts the socket directories, which a
/// host starting in another test would change.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn echo_tool(calls: Arc<AtomicUsize>) -> Tool {
    Tool::new("echo", "Returns its argument.")
        .param("value", ParamType::Any, "anything")
        .handler(move |args| {
            let calls = calls.clone();
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok(args["value"].clone())
            }
        })
}

/// On a local daemon the bridge talks over the host's Unix socket (skipping
/// the daemon's attach relay); tool calls, prints and failures behave as
/// over the attach stream, and the socket's directory is gone as soon as the
/// bridge has connected.
#[tokio::test]
async fn a_local_host_uses_the_direct_channel_and_cleans_it_up() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let (log, _guard) = common::LogCapture::debug_on_this_thread();
    let before = socket_dirs();
    let host = code_host(CodeHostConfig::default()).await;
    assert!(
        log.text().contains("on the direct channel"),
        "the bridge did not connect to the host's socket"
    );
    assert_eq!(
        new_socket_dirs(&before),
        Vec::<String>::new(),
        "the socket's directory outlived the bridge's connection"
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let tools = Toolset::new().tool(echo_tool(calls.clone()));
    let run = host
        .execute(
            "print('before')\nr = await gather(echo(1), echo(2))\nprint('after')\nr",
            json!({}),
            &tools,
        )
        .await
        .unwrap();
    assert_eq!(run.value, json!([1, 2]));
    assert_eq!(run.stdout, "before\nafter\n");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let e = code_error(host.execute("1 / 0", json!({}), &Toolset::new()).await);
    assert!(matches!(e, CodeError::Runtime { .. }), "{e:?}");
    host.close().await.unwrap();
    assert_eq!(
        new_socket_dirs(&before),
        Vec::<String>::new(),
        "the socket's directory was left behind"
    );
}

/// The bridge sends calls the code issues in a row together, but never
/// holds one back while the code goes on computing: a tool gathered beside
/// a long computation starts at once, not when the computation ends.
#[tokio::test]
async fn a_gathered_call_starts_while_the_code_keeps_computing() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let host = code_host(CodeHostConfig::default()).await;
    let called_at: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let stamps = called_at.clone();
    let tools = Toolset::new().tool(
        Tool::new("stamp", "Notes when it was called.")
            .param("value", ParamType::Any, "anything")
            .handler(move |args| {
                let stamps = stamps.clone();
                async move {
                    stamps.lock().unwrap().push(Instant::now());
                    Ok(args["value"].clone())
                }
            }),
    );
    let code = "async def busy():\n    t = 0\n    for i in range(3000000):\n        t += i\n    return t\n\nr = await gather(stamp(7), busy(), stamp(8))\nr";
    let started = Instant::now();
    let run = host.execute(code, json!({}), &tools).await.unwrap();
    let ended = Instant::now();
    assert_eq!(run.value, json!([7, 4499998500000u64, 8]));
    let stamps = called_at.lock().unwrap().clone();
    assert_eq!(stamps.len(), 2, "both calls reached the host");
    let busy_for = ended - started;
    assert!(
        busy_for > Duration::from_millis(100),
        "the computation took {busy_for:?}: too short to tell"
    );
    // The first call went out while `busy` ran, not after it.
    let first_call_after = stamps[0] - started;
    assert!(
        first_call_after < busy_for / 2,
        "the first call reached the host after {first_call_after:?} of {busy_for:?}"
    );
    // The host is unaffected: the next execution gets its own result.
    let next = host.execute("1 + 1", json!({}), &tools).await.unwrap();
    assert_eq!(next.value, json!(2));
    host.close().await.unwrap();
}

/// A prebuilt image gets the compiled bridge in an image of its own (one
/// copy step on top of it), so it is a code host like any other: the direct
/// channel, the fan-out, the policy's loop guard.
#[tokio::test]
async fn a_prebuilt_image_gets_the_compiled_bridge_by_one_copy() {
    let _alone = ONE_AT_A_TIME.lock().await;
    // A user's image, as far as dockhand knows: a name it did not make.
    let plain = common::client()
        .await
        .resolve_image(&ImageSpec::default())
        .await
        .expect("a plain image")
        .reference;
    let name = format!("dockhand-test/prebuilt-codehost:{}", std::process::id());
    common::docker(&["tag", &plain, &name]);
    let (log, _guard) = common::LogCapture::debug_on_this_thread();
    let config = CodeHostConfig::default()
        .image(ImageSpec::prebuilt(&name))
        .policy(CodePolicy::Strict)
        .loop_limit(50);
    let host = code_host(config).await;
    assert!(
        log.text().contains("on the direct channel"),
        "the compiled bridge connects as in any code host"
    );
    let image = host.describe().image.unwrap_or_default();
    assert!(
        image.starts_with("dockhand/") && image != name,
        "it runs an image made on top of the prebuilt one: {image}"
    );
    let calls = Arc::new(AtomicUsize::new(0));
    let tools = Toolset::new().tool(echo_tool(calls.clone()));
    let run = host
        .execute(
            "r = await asyncio.gather(*[echo(i) for i in range(3)])\nprint(sum(r))\nr",
            json!({}),
            &tools,
        )
        .await
        .unwrap();
    assert_eq!(run.value, json!([0, 1, 2]));
    assert_eq!(run.stdout, "3\n");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    // That gather fanned out here too: a value that is not JSON fails it
    // before any of its calls goes out (call by call, two would have).
    let e = code_error(
        host.execute(
            "await gather(*[echo(b'x' if i == 2 else i) for i in range(4)])",
            json!({}),
            &tools,
        )
        .await,
    );
    assert!(
        matches!(&e, CodeError::Tool { message, .. } if message.contains("bytes")),
        "{e:?}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    // Call by call too, as the compiled bridge: a ToolError the code can catch.
    for (code, needle) in [
        ("echo(float('nan'))", "not a JSON number"),
        ("echo(2 ** 70)", "64 bits"),
    ] {
        common::assert_catches_tool_error(&host, code, needle, &tools).await;
    }
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let e = code_error(
        host.execute("for i in range(51):\n    pass", json!({}), &tools)
            .await,
    );
    assert!(matches!(e, CodeError::LoopLimit { line: 1, .. }), "{e:?}");
    let fits = host
        .execute(
            "t = 0\nfor i in range(50):\n    t += i\nt",
            json!({}),
            &tools,
        )
        .await
        .unwrap();
    assert_eq!(fits.value, json!(1225));
    host.close().await.unwrap();
    common::docker(&["rmi", &name]);
}
