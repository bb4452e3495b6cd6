//! Exact values between the host, tools and code: what code mode returns
//! for each Python type is compared with what CPython (the host's python3)
//! says the same expression is, encoded by the documented tags; each value
//! then goes back in as an input and through a tool unchanged.

mod common;

use std::process::Command;

use common::{code_error, code_host};
use dockhand::codemode::{
    BigInt, CodeError, CodeHost, CodeHostConfig, CodeValue, ParamType, Tool, Toolset,
};
use dockhand::{Error, Sandbox, Type};
use serde_json::{json, Value};

/// The exact encoding written in Python (shared with the conformance
/// runner), from `CodeHostConfig::exact_values`' description: CPython's
/// values are the reference.
const ENCODER: &str = concat!(
    include_str!("../examples/monty_conformance/exact.py"),
    r#"
import decimal, json, sys

out = []
for expr in json.load(sys.stdin):
    v = eval(expr)
    out.append([to_wire(v), type(v).__name__])
print(json.dumps(out))
"#
);

/// Expressions whose values plain JSON would change, and some it keeps.
const EXPRESSIONS: &[&str] = &[
    "2 ** 70",
    "-math.factorial(25)",
    "2 ** 64 - 1",
    "-(2 ** 63)",
    "(1, (2, 3), 'x')",
    "()",
    "{3}",
    "frozenset({'a'})",
    "b'\\x00\\xffdockhand'",
    "float('nan')",
    "float('-inf')",
    "0.1 + 0.2",
    "1e300 * 1e10",
    "-0.0",
    "5e-324",
    "datetime.date(2024, 1, 2)",
    "datetime.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=datetime.timezone(datetime.timedelta(hours=1)))",
    "datetime.datetime(2024, 1, 2, 3, 4, 5)",
    "datetime.time(3, 4, 5, 6)",
    "datetime.timedelta(days=-1, microseconds=5)",
    "{1: 'a', (1, 2): 'b'}",
    "{'$int': 'not a tag'}",
    "{'a': [1, {'b': (2,)}]}",
    "decimal.Decimal('1.10')",
];

fn cpython(expressions: &[&str]) -> Vec<Value> {
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(ENCODER)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the host's python3 (the reference)");
    serde_json::to_writer(child.stdin.take().unwrap(), expressions).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the reference failed");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn echo() -> Tool {
    Tool::new("echo", "Returns its argument.")
        .param("value", ParamType::Any, "anything")
        .handler(|args| async move { Ok(args["value"].clone()) })
}

async fn run(host: &CodeHost, code: &str, inputs: Value) -> Value {
    let tools = Toolset::new().tool(echo());
    match host.execute(code, inputs, &tools).await {
        Ok(run) => run.value,
        Err(e) => panic!("{code:?} failed: {e}"),
    }
}

#[tokio::test]
async fn exact_values_match_cpython_and_round_trip() {
    let host = code_host(CodeHostConfig::new().exact_values(true)).await;
    let reference = cpython(EXPRESSIONS);
    for (expr, want) in EXPRESSIONS.iter().zip(&reference) {
        let (value, type_name) = (&want[0], want[1].as_str().unwrap());
        let code = format!("import math, datetime, decimal\n{expr}");
        assert_eq!(&run(&host, &code, json!({})).await, value, "{expr}");
        // Back in as an input: the same type, and the same value again.
        let back = run(
            &host,
            "[type(x).__name__, x]",
            json!({ "x": value.clone() }),
        )
        .await;
        assert_eq!(back, json!([type_name, value]), "{expr} as an input");
        // Through a tool and back: unchanged.
        let code = format!(
            "import math, datetime, decimal\nv = {expr}\nr = echo(v)\n[r, type(r).__name__]"
        );
        assert_eq!(
            run(&host, &code, json!({})).await,
            json!([value, type_name]),
            "{expr} through a tool"
        );
    }
    host.close().await.unwrap();
}

/// Without exact values, results are JSON a model reads; an int past 64
/// bits is still exact rather than a rounded float.
#[tokio::test]
async fn plain_values_keep_big_ints_exact() {
    let host = code_host(CodeHostConfig::new()).await;
    assert_eq!(
        run(&host, "[2 ** 70, (1, 2), 2 ** 64 - 1]", json!({})).await,
        json!([{"$int": "1180591620717411303424"}, [1, 2], u64::MAX])
    );
    // Tagged inputs are read in either mode.
    assert_eq!(
        run(
            &host,
            "[x + 1, type(t).__name__]",
            json!({"x": {"$int": "1180591620717411303424"}, "t": {"$tuple": [1]}})
        )
        .await,
        json!([{"$int": "1180591620717411303425"}, "tuple"])
    );
    host.close().await.unwrap();
}

/// Big ints and class instances reach Rust with their types: a `BigInt`,
/// and with exact values an instance with its class's name.
#[tokio::test]
async fn big_ints_and_instances_are_typed_on_the_rust_side() {
    let code = "from dataclasses import dataclass\n\n@dataclass\nclass Point:\n    x: int\n    y: int\n\nPoint(1, 2 ** 70)";
    let tools = Toolset::new();
    let big: BigInt = "1180591620717411303424".parse().unwrap();
    let exact = code_host(CodeHostConfig::new().exact_values(true)).await;
    let done = exact.execute(code, json!({}), &tools).await.unwrap();
    assert_eq!(
        done.value,
        json!({"$instance": {"class": "Point", "attrs": {"x": 1, "y": {"$int": "1180591620717411303424"}}}})
    );
    let CodeValue::Instance { class, attrs } = done.typed_value() else {
        panic!("{:?}", done.typed_value());
    };
    assert_eq!(class, "Point");
    assert_eq!(attrs["x"], CodeValue::Int(1));
    assert_eq!(attrs["y"], CodeValue::BigInt(big.clone()));
    // Sent back in, an instance is the dict of its attributes.
    let back = run(
        &exact,
        "[type(p).__name__, p['x']]",
        json!({"p": done.value}),
    )
    .await;
    assert_eq!(back, json!(["dict", 1]));
    exact.close().await.unwrap();

    let plain = code_host(CodeHostConfig::new()).await;
    let done = plain.execute(code, json!({}), &tools).await.unwrap();
    assert_eq!(
        done.value,
        json!({"x": 1, "y": {"$int": "1180591620717411303424"}})
    );
    assert_eq!(
        done.typed_value(),
        CodeValue::Dict(vec![
            (CodeValue::Str("x".into()), CodeValue::Int(1)),
            (CodeValue::Str("y".into()), CodeValue::BigInt(big)),
        ])
    );
    plain.close().await.unwrap();
}

/// What code mode makes can leave it: a sandbox tool's file comes back as a
/// handle the application downloads, held until released.
#[tokio::test]
async fn sandboxes_as_tools_pass_file_handles() {
    let host = code_host(CodeHostConfig::new()).await;
    let make_report = Sandbox::code(
        "make_report",
        "open('/var/outputs/report', 'w').write('n=%d' % n)\nsize = n",
    )
    .input("n", Type::Int)
    .output("report", Type::File)
    .output("size", Type::Int)
    .build()
    .unwrap();
    let read_report = Sandbox::code("read_report", "text = open(report).read().upper()")
        .input("report", Type::File)
        .output("text", Type::Str)
        .build()
        .unwrap();
    let tools = Toolset::new().sandbox(make_report).sandbox(read_report);
    let run = host
        .execute(
            "r = make_report(n=7)\nh = r['report']\n[r['size'], h['kind'], read_report(h)]",
            json!({}),
            &tools,
        )
        .await
        .unwrap();
    assert_eq!(run.value, json!([7, "File", "N=7"]));
    // A handle is opaque: the code cannot read the file itself.
    let err = code_error(
        host.execute("r = make_report(n=1)\nopen(r['report'])", json!({}), &tools)
            .await,
    );
    assert!(matches!(err, CodeError::Runtime { .. }), "{err:?}");
    // What the code returns leaves code mode: kept for the application, to
    // download, and usable by later executions until released.
    let run = host
        .execute(
            "r = make_report(n=3)\nunused = make_report(n=4)\n{'chart': r['report']}",
            json!({}),
            &tools,
        )
        .await
        .unwrap();
    assert_eq!(run.files.len(), 1, "only the returned one: {:?}", run.files);
    let file = &run.files[0];
    assert_eq!(run.value["chart"]["$handle"], json!(file.handle));
    assert_eq!(
        (file.name.as_str(), file.is_dir, file.bytes),
        ("report", false, 3)
    );
    assert_eq!(
        host.describe().held_results,
        0,
        "the execution's own are gone"
    );
    let dest = tempfile::tempdir().unwrap();
    host.download(&file.handle, dest.path().join("report.txt"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(dest.path().join("report.txt")).unwrap(),
        "n=3"
    );
    let kept = run.value["chart"].clone();
    let again = host
        .execute("read_report(kept)", json!({ "kept": kept }), &tools)
        .await
        .unwrap();
    assert_eq!(again.value, json!("N=3"));
    assert_eq!(host.result_files(), run.files);
    // Released: gone for the code and for the application, typed.
    assert!(host.release(&file.handle));
    let err = code_error(
        host.execute("read_report(kept)", json!({ "kept": kept }), &tools)
            .await,
    );
    assert!(
        matches!(err, CodeError::Tool { ref message, .. } if message.contains("no longer held")),
        "{err:?}"
    );
    let err = host
        .download(&file.handle, dest.path().join("again"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UnknownHandle { .. }), "{err:?}");
    assert!(host.result_files().is_empty());
    // A REPL session keeps its results until it closes.
    let session = host.session();
    session
        .execute("h = make_report(n=5)['report']", json!({}), &tools)
        .await
        .unwrap();
    let again = session
        .execute("read_report(h)", json!({}), &tools)
        .await
        .unwrap();
    assert_eq!(again.value, json!("N=5"));
    assert_eq!(host.describe().held_results, 1);
    session.close().await.unwrap();
    assert_eq!(host.describe().held_results, 0);
    host.close().await.unwrap();
    common::assert_no_container("make_report");
    common::assert_no_container("read_report");
}
