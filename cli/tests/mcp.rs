//! `dockhand mcp` end to end over stdio with rmcp's client: initialize, list
//! tools, call each, errors as tool errors, nothing left once the client goes.

mod common;

use std::time::Duration;

use common::{body, call, failed};
use serde_json::json;

fn containers(label: &str) -> usize {
    let out = std::process::Command::new("docker")
        .args(["ps", "-aq", "--filter", &format!("label={label}")])
        .output()
        .expect("docker CLI");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[tokio::test]
async fn every_tool_over_stdio_and_nothing_left_after() {
    let client = common::mcp_client().await;
    let info = client.peer_info().expect("server info");
    assert!(info
        .instructions
        .as_deref()
        .unwrap_or("")
        .contains("run_python"));

    let mut names: Vec<String> = client
        .list_all_tools()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name.to_string())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "edit_file",
            "execute",
            "fork_session",
            "list_dir",
            "list_modules",
            "read_file",
            "read_module",
            "resume",
            "run_code",
            "run_python",
            "shell",
            "write_file"
        ]
    );

    let ran = call(&client, "run_python", json!({"code": "print(6 * 7)"})).await;
    assert!(!failed(&ran), "{ran:?}");
    assert_eq!(body(&ran)["stdout"], "42\n");
    let raised = call(
        &client,
        "run_python",
        json!({"code": "raise ValueError('boom')"}),
    )
    .await;
    assert!(failed(&raised));
    assert!(body(&raised)["stderr"]
        .as_str()
        .unwrap_or("")
        .contains("ValueError: boom"));

    let wrote = call(
        &client,
        "write_file",
        json!({"path": "calc.py", "content": "def add(a, b):\n    return a - b\n"}),
    )
    .await;
    assert!(!failed(&wrote), "{wrote:?}");
    let edited = call(
        &client,
        "edit_file",
        json!({"path": "calc.py", "edits": [{"old": "a - b", "new": "a + b"}]}),
    )
    .await;
    assert_eq!(body(&edited)["applied"], 1, "{edited:?}");
    let read = call(&client, "read_file", json!({"path": "calc.py"})).await;
    assert!(body(&read).to_string().contains("a + b"), "{read:?}");
    let listed = call(&client, "list_dir", json!({})).await;
    assert!(body(&listed).to_string().contains("calc.py"), "{listed:?}");
    let shell = call(
        &client,
        "shell",
        json!({"command": "python3 -c 'import calc; print(calc.add(2, 3))'"}),
    )
    .await;
    assert_eq!(body(&shell)["stdout"], "5\n", "{shell:?}");
    // A second session is separate.
    let other = call(&client, "list_dir", json!({"session": "other"})).await;
    assert!(!body(&other).to_string().contains("calc.py"), "{other:?}");
    // Forks start from the session's files, then change apart.
    let forked = call(
        &client,
        "fork_session",
        json!({"names": ["try-a", "try-b"]}),
    )
    .await;
    assert!(!failed(&forked), "{forked:?}");
    let changed = call(
        &client,
        "write_file",
        json!({"path": "calc.py", "content": "changed\n", "session": "try-a"}),
    )
    .await;
    assert!(!failed(&changed), "{changed:?}");
    let kept = call(
        &client,
        "read_file",
        json!({"path": "calc.py", "session": "try-b"}),
    )
    .await;
    assert!(body(&kept).to_string().contains("a + b"), "{kept:?}");
    let parent = call(&client, "read_file", json!({"path": "calc.py"})).await;
    assert!(body(&parent).to_string().contains("a + b"), "{parent:?}");
    let taken = call(&client, "fork_session", json!({"names": ["try-a"]})).await;
    assert!(failed(&taken), "{taken:?}");
    // What the model can fix comes back as a tool error.
    let missing = call(
        &client,
        "edit_file",
        json!({"path": "calc.py", "edits": [{"old": "nowhere", "new": "x"}]}),
    )
    .await;
    assert!(failed(&missing));
    assert!(
        body(&missing).to_string().contains("not found"),
        "{missing:?}"
    );

    let executed = call(
        &client,
        "execute",
        json!({"code": "out = python(code='print(2 ** 10)')\nx + len(out)", "inputs": {"x": 1}}),
    )
    .await;
    assert!(!failed(&executed), "{executed:?}");
    assert_eq!(body(&executed)["value"], 6);
    let bad = call(&client, "execute", json!({"code": "1 +"})).await;
    assert!(failed(&bad), "{bad:?}");

    // The kernel keeps state between calls and returns charts as images.
    let first = call(&client, "run_code", json!({"code": "xs = [1, 4, 9]"})).await;
    assert!(!failed(&first), "{first:?}");
    let chart = call(
        &client,
        "run_code",
        json!({"code": "plt.plot(xs)\nplt.title('squares')\nsum(xs)"}),
    )
    .await;
    assert!(!failed(&chart), "{chart:?}");
    let summary = body(&chart);
    assert_eq!(summary["results"][0]["text"], "14", "{summary}");
    let images: Vec<_> = chart
        .content
        .iter()
        .filter_map(|c| c.raw.as_image())
        .collect();
    assert_eq!(images.len(), 1, "{chart:?}");
    assert_eq!(images[0].mime_type, "image/png");
    use base64::Engine as _;
    let png = base64::engine::general_purpose::STANDARD
        .decode(&images[0].data)
        .unwrap();
    assert_eq!(&png[..4], b"\x89PNG");
    assert!(summary.to_string().contains("squares"), "{summary}");
    // Code that raises is a tool error with the exception.
    let raised = call(&client, "run_code", json!({"code": "xs[10]"})).await;
    assert!(failed(&raised));
    assert_eq!(body(&raised)["error"]["name"], "IndexError", "{raised:?}");
    // Contexts are apart.
    let other = call(
        &client,
        "run_code",
        json!({"code": "'xs' in globals()", "context": "b"}),
    )
    .await;
    assert_eq!(body(&other)["results"][0]["text"], "False", "{other:?}");
    // A language: Python by name runs; one the server was not started with
    // (`--languages`) or that no kernel speaks is a tool error saying so.
    let python = call(
        &client,
        "run_code",
        json!({"code": "len(xs)", "language": "python"}),
    )
    .await;
    assert_eq!(body(&python)["results"][0]["text"], "3", "{python:?}");
    let r = call(&client, "run_code", json!({"code": "1", "language": "r"})).await;
    assert!(failed(&r), "{r:?}");
    assert!(format!("{r:?}").contains("--languages r"), "{r:?}");
    let cobol = call(
        &client,
        "run_code",
        json!({"code": "1", "language": "cobol"}),
    )
    .await;
    assert!(failed(&cobol), "{cobol:?}");
    assert!(format!("{cobol:?}").contains("cobol"), "{cobol:?}");

    let before =
        containers("dev.dockhand.kind=session") + containers("dev.dockhand.kind=code-host");
    assert!(
        before >= 4,
        "two sessions, a kernel and a code host were running"
    );
    client.cancel().await.expect("close the client");
    // The server closes its sessions and code host once the client has gone.
    let mut left = before;
    for _ in 0..60 {
        left = containers("dev.dockhand.kind=session") + containers("dev.dockhand.kind=code-host");
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert_eq!(left, 0, "the server left sessions or code hosts behind");
}
