//! Approvals and durable executions: code stops at a call of a tool that
//! needs approval, the host keeps nothing, and the execution goes on later,
//! in another code host or another process, with the same printed output
//! and value as a run that never stopped. Tampered, foreign and replayed
//! suspensions are refused and never run.

mod common;

use common::{code_error, code_host as host_with};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use dockhand::codemode::{
    CodeError, CodeHostConfig, Decision, ParamType, SuspensionStore, Tool, Toolset,
};
use dockhand::Error;
use serde_json::{json, Value};

/// Counts the calls of each tool, so a test can tell a tool never ran, or ran once.
#[derive(Default)]
struct Counts {
    lookup: AtomicU64,
    delete: AtomicU64,
}

/// `lookup(n)` returns `n * 10`; `delete(n)` needs approval (unless
/// `approval` is false) and returns `"deleted n"`; `slow(ms)` sleeps.
fn tools(counts: &Arc<Counts>, approval: bool) -> Toolset {
    let (c1, c2) = (counts.clone(), counts.clone());
    let delete = Tool::new("delete", "Deletes record n.")
        .param("n", ParamType::Int, "")
        .handler(move |a| {
            let c = c2.clone();
            async move {
                c.delete.fetch_add(1, Ordering::SeqCst);
                Ok(json!(format!("deleted {}", a["n"])))
            }
        });
    Toolset::new()
        .tool(
            Tool::new("lookup", "Looks up n.")
                .param("n", ParamType::Int, "")
                .handler(move |a| {
                    let c = c1.clone();
                    async move {
                        c.lookup.fetch_add(1, Ordering::SeqCst);
                        Ok(json!(a["n"].as_i64().unwrap_or(0) * 10))
                    }
                }),
        )
        .tool(
            Tool::new("slow", "Sleeps ms, returns ms.")
                .param("ms", ParamType::Int, "")
                .handler(|a| async move {
                    let ms = a["ms"].as_u64().unwrap_or(0);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    Ok(json!(ms))
                }),
        )
        .tool(if approval {
            delete.requires_approval()
        } else {
            delete
        })
}

const CODE: &str = r#"
print("start")
a = await lookup(1)
print("looked up", a)
r = await delete(a)
print("then", r)
b = lookup(2)
{"a": a, "r": r, "b": b}
"#;

fn config(store: &std::path::Path) -> CodeHostConfig {
    CodeHostConfig::new().suspensions(SuspensionStore::at(store))
}

#[tokio::test]
async fn approved_calls_go_on_with_the_same_output_and_value_as_an_uninterrupted_run() {
    let store = tempfile::tempdir().unwrap();
    let host = host_with(config(store.path())).await;
    let counts = Arc::new(Counts::default());
    let plain = host
        .execute(CODE, json!({}), &tools(&Arc::new(Counts::default()), false))
        .await
        .unwrap();
    assert!(plain.suspended.is_none());

    let stopped = host
        .execute(CODE, json!({}), &tools(&counts, true))
        .await
        .unwrap();
    let suspended = stopped.suspended.clone().expect("it stops at delete");
    assert_eq!(stopped.value, Value::Null);
    assert_eq!(suspended.tool(), "delete");
    assert_eq!(suspended.args(), &json!({"n": 10}));
    assert_eq!(stopped.stdout, "start\nlooked up 10\n");
    assert_eq!(counts.delete.load(Ordering::SeqCst), 0, "nothing ran yet");

    let done = host
        .resume(&suspended, Decision::Approve, &tools(&counts, true))
        .await
        .unwrap();
    assert!(done.suspended.is_none());
    assert_eq!(done.value, plain.value);
    assert_eq!(done.stdout, plain.stdout);
    assert_eq!(done.value, json!({"a": 10, "r": "deleted 10", "b": 20}));
    assert_eq!(counts.delete.load(Ordering::SeqCst), 1);
    assert_eq!(
        counts.lookup.load(Ordering::SeqCst),
        2,
        "lookup(1) did not run again"
    );
    let names: Vec<&str> = done.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["delete", "lookup"]);
    host.close().await.unwrap();
}

#[tokio::test]
async fn a_suspension_resumes_in_another_host_after_the_first_is_gone() {
    let store = tempfile::tempdir().unwrap();
    let counts = Arc::new(Counts::default());
    let first = host_with(config(store.path())).await;
    let first_id = first.describe().container_id.unwrap();
    let stopped = first
        .execute(CODE, json!({}), &tools(&counts, true))
        .await
        .unwrap();
    let kept = stopped.suspended.unwrap().to_bytes();
    first.close().await.unwrap();
    common::wait_gone(&first_id).await;

    // A new client and host, as after a restart, with the same store.
    let second = host_with(config(store.path())).await;
    let suspended = second.open_suspended(&kept).await.unwrap();
    let done = second
        .resume(&suspended, Decision::Approve, &tools(&counts, true))
        .await
        .unwrap();
    assert_eq!(done.value, json!({"a": 10, "r": "deleted 10", "b": 20}));
    assert_eq!(done.stdout, "start\nlooked up 10\nthen deleted 10\n");
    second.close().await.unwrap();
}

/// Resumes the suspension in the file `DOCKHAND_TEST_RESUME` in this
/// (child) process and writes the outcome beside it. Run by
/// `a_suspension_resumes_in_another_process`; on its own it has nothing to do.
#[tokio::test]
async fn child_process_resumes_a_kept_suspension() {
    let Some(path) = std::env::var_os("DOCKHAND_TEST_RESUME") else {
        return;
    };
    let path = std::path::PathBuf::from(path);
    let store = path.parent().unwrap().join("store");
    let host = host_with(config(&store)).await;
    let kept = std::fs::read(&path).unwrap();
    let suspended = host.open_suspended(&kept).await.unwrap();
    let counts = Arc::new(Counts::default());
    let done = host
        .resume(&suspended, Decision::Approve, &tools(&counts, true))
        .await
        .unwrap();
    let out = json!({"value": done.value, "stdout": done.stdout, "deleted": counts.delete.load(Ordering::SeqCst)});
    std::fs::write(path.with_extension("out"), out.to_string()).unwrap();
    host.close().await.unwrap();
}

#[tokio::test]
async fn a_suspension_resumes_in_another_process() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let host = host_with(config(&store)).await;
    let counts = Arc::new(Counts::default());
    let stopped = host
        .execute(CODE, json!({}), &tools(&counts, true))
        .await
        .unwrap();
    host.close().await.unwrap();
    let blob = dir.path().join("suspended.bin");
    std::fs::write(&blob, stopped.suspended.unwrap().to_bytes()).unwrap();
    let child = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "child_process_resumes_a_kept_suspension",
            "--exact",
            "--nocapture",
        ])
        .env("DOCKHAND_TEST_RESUME", &blob)
        .output()
        .await
        .unwrap();
    assert!(
        child.status.success(),
        "{}",
        String::from_utf8_lossy(&child.stdout)
    );
    let out: Value =
        serde_json::from_slice(&std::fs::read(blob.with_extension("out")).unwrap()).unwrap();
    assert_eq!(
        out,
        json!({"value": {"a": 10, "r": "deleted 10", "b": 20},
               "stdout": "start\nlooked up 10\nthen deleted 10\n", "deleted": 1})
    );
    assert_eq!(
        counts.delete.load(Ordering::SeqCst),
        0,
        "this process ran nothing"
    );
}

#[tokio::test]
async fn rejected_and_answered_calls_never_run_the_tool() {
    let store = tempfile::tempdir().unwrap();
    let host = host_with(config(store.path())).await;
    let counts = Arc::new(Counts::default());
    let code = r#"
try:
    r = await delete(3)
except ToolError as e:
    r = "refused: " + str(e)
r
"#;
    let stopped = host
        .execute(code, json!({}), &tools(&counts, true))
        .await
        .unwrap();
    let done = host
        .resume(
            &stopped.suspended.unwrap(),
            Decision::Reject("not on Fridays".into()),
            &tools(&counts, true),
        )
        .await
        .unwrap();
    assert_eq!(
        done.value,
        json!("refused: delete() was not approved: not on Fridays")
    );

    // Uncaught, a rejection is the tool's error at the call's line.
    let stopped = host
        .execute("x = 1\nawait delete(4)", json!({}), &tools(&counts, true))
        .await
        .unwrap();
    let err = code_error(
        host.resume(
            &stopped.suspended.unwrap(),
            Decision::Reject(String::new()),
            &tools(&counts, true),
        )
        .await,
    );
    assert!(
        matches!(&err, CodeError::Tool { line: 2, message } if message.contains("no reason given")),
        "{err:?}"
    );

    // A synchronous call answered by the application.
    let stopped = host
        .execute("r = delete(5)\nr + '!'", json!({}), &tools(&counts, true))
        .await
        .unwrap();
    let done = host
        .resume(
            &stopped.suspended.unwrap(),
            Decision::Return(json!("kept")),
            &tools(&counts, true),
        )
        .await
        .unwrap();
    assert_eq!(done.value, json!("kept!"));
    assert_eq!(counts.delete.load(Ordering::SeqCst), 0);
    host.close().await.unwrap();
}

#[tokio::test]
async fn calls_in_flight_are_kept_and_later_approvals_stop_again() {
    let store = tempfile::tempdir().unwrap();
    let host = host_with(config(store.path())).await;
    let counts = Arc::new(Counts::default());
    let code = r#"
a, b = await gather(slow(300), delete(1))
c = await delete(2)
[a, b, c]
"#;
    let stopped = host
        .execute(code, json!({}), &tools(&counts, true))
        .await
        .unwrap();
    let first = stopped.suspended.unwrap();
    assert_eq!(first.args(), &json!({"n": 1}));
    // slow(300) was under way when delete(1) stopped the code: its result
    // is kept with the suspension.
    assert_eq!(stopped.tool_calls.len(), 1);
    let again = host
        .resume(&first, Decision::Approve, &tools(&counts, true))
        .await
        .unwrap();
    let second = again.suspended.expect("delete(2) stops it again");
    assert_eq!(second.args(), &json!({"n": 2}));
    let done = host
        .resume(&second, Decision::Approve, &tools(&counts, true))
        .await
        .unwrap();
    assert_eq!(done.value, json!([300, "deleted 1", "deleted 2"]));
    assert_eq!(counts.delete.load(Ordering::SeqCst), 2);
    host.close().await.unwrap();
}

#[tokio::test]
async fn tampered_foreign_and_replayed_suspensions_are_refused_and_never_run() {
    let store = tempfile::tempdir().unwrap();
    let host = host_with(config(store.path())).await;
    let counts = Arc::new(Counts::default());
    let stopped = host
        .execute(CODE, json!({}), &tools(&counts, true))
        .await
        .unwrap();
    let suspended = stopped.suspended.unwrap();
    let kept = suspended.to_bytes();

    // The tool name in the body, changed: the seal no longer matches.
    let text = String::from_utf8_lossy(&kept).into_owned();
    let at = text
        .find("\"tool\":\"delete\"")
        .expect("the body names the tool");
    let mut tampered = kept.clone();
    tampered[at + 8..at + 14].copy_from_slice(b"lookup");
    let err = host.open_suspended(&tampered).await.unwrap_err();
    assert!(matches!(err, Error::SuspensionRefused { .. }), "{err}");

    // Sealed by another installation's store.
    let other = tempfile::tempdir().unwrap();
    let foreign = common::client().await.code_host(config(other.path()));
    let err = foreign.open_suspended(&kept).await.unwrap_err();
    assert!(err.to_string().contains("another store's key"), "{err}");

    // The first resume runs; a replay of the same blob is refused.
    let opened = host.open_suspended(&kept).await.unwrap();
    host.resume(&opened, Decision::Approve, &tools(&counts, true))
        .await
        .unwrap();
    let err = host
        .resume(&suspended, Decision::Approve, &tools(&counts, true))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("resumed already"), "{err}");
    assert_eq!(counts.delete.load(Ordering::SeqCst), 1, "the tool ran once");

    // The host is unaffected.
    let run = host
        .execute("await lookup(7)", json!({}), &tools(&counts, true))
        .await
        .unwrap();
    assert_eq!(run.value, json!(70));
    host.close().await.unwrap();
}

/// A store over the same directory with a shorter ttl (another process's,
/// say) does not forget that a blob was resumed: a replay of it through
/// that store is refused, however old the record looks.
#[tokio::test]
async fn a_replay_through_a_store_with_a_short_ttl_is_refused() {
    let store = tempfile::tempdir().unwrap();
    let host = host_with(config(store.path())).await;
    let counts = Arc::new(Counts::default());
    let stopped = host
        .execute(CODE, json!({}), &tools(&counts, true))
        .await
        .unwrap();
    let kept = stopped.suspended.unwrap().to_bytes();
    let opened = host.open_suspended(&kept).await.unwrap();
    host.resume(&opened, Decision::Approve, &tools(&counts, true))
        .await
        .unwrap();
    host.close().await.unwrap();
    // A day passes before the replay.
    let day_ago = std::time::SystemTime::now() - Duration::from_secs(86_400);
    for record in std::fs::read_dir(store.path().join("resumed")).unwrap() {
        std::fs::File::options()
            .write(true)
            .open(record.unwrap().path())
            .unwrap()
            .set_modified(day_ago)
            .unwrap();
    }
    let short = host_with(
        CodeHostConfig::new()
            .suspensions(SuspensionStore::at(store.path()).ttl(Duration::from_secs(1))),
    )
    .await;
    let replayed = short.open_suspended(&kept).await.unwrap();
    let err = short
        .resume(&replayed, Decision::Approve, &tools(&counts, true))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("resumed already"), "{err}");
    assert_eq!(counts.delete.load(Ordering::SeqCst), 1, "the tool ran once");
    short.close().await.unwrap();
}

#[tokio::test]
async fn state_over_the_limit_fails_typed_and_sessions_refuse_approval_tools() {
    let store = tempfile::tempdir().unwrap();
    let config = CodeHostConfig::new()
        .suspensions(SuspensionStore::at(store.path()).max_state_bytes(256 << 10));
    let host = host_with(config).await;
    let counts = Arc::new(Counts::default());
    let err = code_error(
        host.execute(
            "big = 'x' * 2_000_000\nawait delete(1)",
            json!({}),
            &tools(&counts, true),
        )
        .await,
    );
    assert!(
        matches!(&err, CodeError::SuspendLimit { message } if message.contains("262,144")),
        "{err:?}"
    );
    let session = host.session();
    let err = session
        .execute("1", json!({}), &tools(&counts, true))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidSpec { .. }), "{err}");
    assert!(err.to_string().contains("delete"), "{err}");
    let run = host
        .execute("await lookup(1)", json!({}), &tools(&counts, true))
        .await
        .unwrap();
    assert_eq!(run.value, json!(10));
    assert_eq!(counts.delete.load(Ordering::SeqCst), 0);
    host.close().await.unwrap();
}

#[tokio::test]
async fn a_type_error_stops_the_code_before_any_tool_runs() {
    let host = host_with(CodeHostConfig::new().type_check(true)).await;
    let counts = Arc::new(Counts::default());
    // lookup(1) would run first; the checker sees delete("ten") first.
    let err = code_error(
        host.execute(
            "a = await lookup(1)\nprint(a)\nr = await delete(\"ten\")\nr",
            json!({}),
            &tools(&counts, false),
        )
        .await,
    );
    assert!(
        matches!(&err, CodeError::Validation { rule, line: 3, col, message }
            if rule == "type" && *col > 1 && message.contains("Expected `int`")),
        "{err:?}"
    );
    assert_eq!(counts.lookup.load(Ordering::SeqCst), 0, "no tool ran");
    assert_eq!(counts.delete.load(Ordering::SeqCst), 0);
    let run = host
        .execute("a = await lookup(1)\na", json!({}), &tools(&counts, false))
        .await
        .unwrap();
    assert_eq!(run.value, json!(10));
    host.close().await.unwrap();
}
