//! The direct channel between a code host and its bridge (a Unix socket,
//! local daemons only). A test binary of its own: it counts the socket
//! directories on this machine, which other tests running at the same time
//! would change.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{code_error, code_host};
use dockhand::codemode::{CodeError, CodeHostConfig, ParamType, Tool, Toolset};
use serde_json::json;

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
/// over the attach stream, and the socket's directory goes with the host.
#[tokio::test]
async fn a_local_host_uses_the_direct_channel_and_cleans_it_up() {
    let (log, _guard) = common::LogCapture::debug_on_this_thread();
    let before = socket_dirs();
    let host = code_host(CodeHostConfig::default()).await;
    assert!(
        log.text().contains("on the direct channel"),
        "the bridge did not connect to the host's socket"
    );
    assert_eq!(socket_dirs().len(), before.len() + 1);
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
        socket_dirs(),
        before,
        "the socket's directory was left behind"
    );
}

/// The directories the code hosts' sockets live in, on this machine.
fn socket_dirs() -> Vec<String> {
    let mut dirs: Vec<String> = std::fs::read_dir(std::env::temp_dir())
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("dockhand-bridge-"))
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}
