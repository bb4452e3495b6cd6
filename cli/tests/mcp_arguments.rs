//! `dockhand mcp`'s tool arguments, checked as declared: every tool's schema
//! refuses unknown properties, every advertised argument is sent and shown
//! to take effect, and out-of-range values (a negative timeout) are errors.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{body, call, failed, try_call};
use serde_json::{json, Value};

/// The arguments each tool advertises, as this test exercises them below.
fn exercised() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
    [
        ("run_python", &["allow_hosts", "code", "pip", "timeout"][..]),
        ("shell", &["command", "session", "timeout"]),
        ("read_file", &["path", "session"]),
        ("write_file", &["path", "content", "session"]),
        ("edit_file", &["path", "edits", "session"]),
        ("list_dir", &["path", "session"]),
        ("fork_session", &["names", "session"]),
        ("execute", &["code", "inputs"]),
        ("resume", &["decision", "id", "reason", "value"]),
        ("run_code", &["code", "context", "language", "timeout"]),
        ("list_modules", &[]),
        ("read_module", &["path"]),
    ]
    .into_iter()
    .map(|(tool, args)| (tool, args.iter().copied().collect()))
    .collect()
}

#[tokio::test]
async fn every_advertised_argument_is_checked_and_takes_effect() {
    let client = common::mcp_client().await;

    // What is advertised is what is exercised here, and nothing else is taken.
    let tools = client.list_all_tools().await.unwrap();
    let expected = exercised();
    assert_eq!(tools.len(), expected.len());
    for tool in &tools {
        let schema = Value::Object((*tool.input_schema).clone());
        assert_eq!(
            schema["additionalProperties"],
            json!(false),
            "{}: {schema}",
            tool.name
        );
        let advertised: BTreeSet<&str> = schema["properties"]
            .as_object()
            .map(|p| p.keys().map(String::as_str).collect())
            .unwrap_or_default();
        assert_eq!(
            Some(&advertised),
            expected.get(tool.name.as_ref()),
            "{}: advertised arguments without a check here",
            tool.name
        );
    }
    for (tool, args) in [
        ("run_python", json!({"code": "1", "timeout_s": 1})),
        ("shell", json!({"command": "true", "timeout_s": 1})),
        ("run_code", json!({"code": "1", "ctx": "a"})),
        ("list_modules", json!({"path": "tools"})),
        ("read_module", json!({"path": "tools", "module": "x"})),
    ] {
        let refused = try_call(&client, tool, args).await;
        let refused = match refused {
            Err(e) => e,
            Ok(r) if failed(&r) => body(&r).to_string(),
            Ok(r) => panic!("{tool} took an unknown argument: {r:?}"),
        };
        assert!(refused.contains("unknown field"), "{tool}: {refused}");
    }

    // read_module: the module named is the one read.
    let read = call(&client, "read_module", json!({"path": "tools"})).await;
    assert!(!failed(&read), "{read:?}");
    assert!(
        format!("{:?}", read.content).contains("def python(code: str)"),
        "{read:?}"
    );
    let listed = call(&client, "list_modules", json!({})).await;
    assert_eq!(body(&listed)[0]["path"], "tools", "{listed:?}");

    // run_python: allow_hosts may only narrow the server's allow-list, and
    // this server has none (tests/egress.rs shows it narrowing one).
    let widened = call(
        &client,
        "run_python",
        json!({"code": "print(1)", "allow_hosts": ["pypi.org"]}),
    )
    .await;
    assert!(failed(&widened), "{widened:?}");
    assert!(
        body(&widened)
            .to_string()
            .contains("gives run_python no network"),
        "{widened:?}"
    );

    // run_python: pip packages are installed, and the timeout is applied.
    let with_pip = call(
        &client,
        "run_python",
        json!({"code": "import six; print(six.__name__)", "pip": ["six==1.16.0"], "timeout": 120}),
    )
    .await;
    assert_eq!(body(&with_pip)["stdout"], "six\n", "{with_pip:?}");
    let slow = call(
        &client,
        "run_python",
        json!({"code": "import time; time.sleep(30)", "timeout": 1}),
    )
    .await;
    assert!(failed(&slow), "{slow:?}");
    assert!(
        body(&slow).to_string().contains("timed out after 1s"),
        "{slow:?}"
    );
    // A traceback names the user's file and line, nothing of dockhand's.
    let raised = call(&client, "run_python", json!({"code": "x = 1\nx / 0"})).await;
    let stderr = body(&raised)["stderr"].as_str().unwrap_or("").to_string();
    assert!(stderr.contains("File \"main.py\", line 2"), "{stderr}");
    assert!(!stderr.contains(".dockhand"), "{stderr}");
    for bad in [-5.0, 0.0, 1e9] {
        let refused = call(
            &client,
            "run_python",
            json!({"code": "print(1)", "timeout": bad}),
        )
        .await;
        assert!(failed(&refused), "timeout {bad}: {refused:?}");
        assert!(
            body(&refused).to_string().contains("timeout must be"),
            "{refused:?}"
        );
    }

    // Session tools: the named session, paths, content, edits, timeouts.
    let session = "args";
    let wrote = call(
        &client,
        "write_file",
        json!({"path": "d/notes.txt", "content": "one two", "session": session}),
    )
    .await;
    assert_eq!(body(&wrote)["written_bytes"], 7, "{wrote:?}");
    let edited = call(
        &client,
        "edit_file",
        json!({"path": "d/notes.txt", "edits": [{"old": "two", "new": "three"}], "session": session}),
    )
    .await;
    assert_eq!(body(&edited)["applied"], 1, "{edited:?}");
    let read = call(
        &client,
        "read_file",
        json!({"path": "d/notes.txt", "session": session}),
    )
    .await;
    assert_eq!(body(&read)["content"], "one three", "{read:?}");
    let listed = call(
        &client,
        "list_dir",
        json!({"path": "d", "session": session}),
    )
    .await;
    assert!(
        body(&listed).to_string().contains("notes.txt"),
        "{listed:?}"
    );
    let elsewhere = call(&client, "read_file", json!({"path": "d/notes.txt"})).await;
    assert!(
        failed(&elsewhere),
        "the default session is another one: {elsewhere:?}"
    );
    let shell = call(
        &client,
        "shell",
        json!({"command": "cat d/notes.txt", "session": session}),
    )
    .await;
    assert_eq!(body(&shell)["stdout"], "one three", "{shell:?}");
    let slow = call(
        &client,
        "shell",
        json!({"command": "sleep 30; echo done", "timeout": 1, "session": session}),
    )
    .await;
    assert!(failed(&slow), "the timeout was applied: {slow:?}");
    assert!(
        body(&slow).to_string().contains("ran longer than 1.0s"),
        "{slow:?}"
    );
    let negative = call(
        &client,
        "shell",
        json!({"command": "true", "timeout": -5, "session": session}),
    )
    .await;
    assert!(failed(&negative), "{negative:?}");

    // fork_session: the named session is copied under each name.
    let forked = call(
        &client,
        "fork_session",
        json!({"session": session, "names": ["args-copy"]}),
    )
    .await;
    assert!(!failed(&forked), "{forked:?}");
    let copied = call(
        &client,
        "read_file",
        json!({"path": "d/notes.txt", "session": "args-copy"}),
    )
    .await;
    assert_eq!(body(&copied)["content"], "one three", "{copied:?}");
    for names in [
        json!([]),
        json!(["a", "b", "c", "d", "e", "f", "g", "h", "i"]),
    ] {
        let refused = try_call(&client, "fork_session", json!({"names": names})).await;
        assert!(
            refused.is_err() || refused.as_ref().is_ok_and(failed),
            "{names}: {refused:?}"
        );
    }

    // Code mode: the inputs are the code's variables.
    let executed = call(
        &client,
        "execute",
        json!({"code": "x * 2", "inputs": {"x": 21}}),
    )
    .await;
    assert_eq!(body(&executed)["value"], 42, "{executed:?}");

    // resume: each argument is read (their effects: cli/tests/code_approvals.rs).
    for (args, says) in [
        (
            json!({"id": "susp-00", "decision": "maybe"}),
            "decision must be",
        ),
        (
            json!({"id": "../key", "decision": "reject", "reason": "r"}),
            "not a suspension id",
        ),
        (
            json!({"id": "susp-00", "decision": "answer", "value": 1}),
            "no suspension",
        ),
    ] {
        let refused = call(&client, "resume", args).await;
        assert!(failed(&refused), "{refused:?}");
        assert!(body(&refused).to_string().contains(says), "{refused:?}");
    }

    // The kernel: contexts keep their own state, and the timeout interrupts.
    let set = call(
        &client,
        "run_code",
        json!({"code": "k = 7", "context": "one"}),
    )
    .await;
    assert!(!failed(&set), "{set:?}");
    let got = call(&client, "run_code", json!({"code": "k", "context": "one"})).await;
    assert_eq!(body(&got)["results"][0]["text"], "7", "{got:?}");
    let elsewhere = call(&client, "run_code", json!({"code": "'k' in globals()"})).await;
    assert_eq!(body(&elsewhere)["results"][0]["text"], "False");
    let slow = call(
        &client,
        "run_code",
        json!({"code": "import time; time.sleep(30)", "context": "one", "timeout": 1}),
    )
    .await;
    assert!(failed(&slow), "{slow:?}");
    assert!(body(&slow).to_string().contains("1s"), "{slow:?}");
    let kept = call(&client, "run_code", json!({"code": "k", "context": "one"})).await;
    assert_eq!(
        body(&kept)["results"][0]["text"],
        "7",
        "an interrupt keeps state"
    );
    let refused = call(&client, "run_code", json!({"code": "1", "timeout": -5})).await;
    assert!(failed(&refused), "{refused:?}");
    // language: Python by name shares the default context; a language this
    // server was not started with is refused by name (tests/mcp.rs runs one).
    let named = call(
        &client,
        "run_code",
        json!({"code": "'k' in globals()", "language": "python"}),
    )
    .await;
    assert_eq!(body(&named)["results"][0]["text"], "False", "{named:?}");
    let off = call(
        &client,
        "run_code",
        json!({"code": "echo hi", "language": "bash"}),
    )
    .await;
    assert!(failed(&off), "{off:?}");
    assert!(
        body(&off).to_string().contains("--languages bash"),
        "{off:?}"
    );

    client.cancel().await.expect("close the client");
}
