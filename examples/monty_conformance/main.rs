//! Runs a directory of Python test cases (Monty's own suite, say) twice: in
//! plain Monty (pydantic-monty) inside the code host's image, and through
//! dockhand's code host.
//! Each case's printed output, final value and exception class are compared;
//! differences caused by rules dockhand adds on purpose are counted apart.
//! The code host runs the default policy; `DOCKHAND_POLICY=strict` runs the
//! strict one.
//!
//! ```text
//! cargo run --release --example monty_conformance -- DIR
//! ```
//!
//! Monty's suite ships in the `pydantic-monty-runtime` source distribution
//! (`crates/monty/test_cases/`); it is not part of this repository.

use std::collections::BTreeMap;
use std::path::PathBuf;

use dockhand::codemode::{CodeError, CodeHostConfig, CodePolicy, Toolset};
use dockhand::{Client, Error};
use serde_json::{json, Value};

/// Runs every case in plain Monty (a fresh interpreter each, the same limits
/// as the code host), printing one JSON line per case.
const REFERENCE: &str = include_str!("reference.py");

/// What one run of a case came to: its class (`ok` or an exception class),
/// its value and its printed output.
#[derive(Debug, PartialEq)]
struct Outcome {
    class: String,
    value: Value,
    stdout: String,
}

fn dockhand_outcome(result: dockhand::Result<dockhand::codemode::Execution>) -> Outcome {
    match result {
        Ok(run) => Outcome {
            class: "ok".into(),
            value: run.value,
            stdout: run.stdout,
        },
        Err(Error::Code(f)) => {
            let class = match &f.error {
                CodeError::Runtime { exception_type, .. } => exception_type.clone(),
                CodeError::Validation { rule, .. } if rule == "syntax" => "SyntaxError".into(),
                CodeError::Validation { rule, .. } => format!("rule:{rule}"),
                CodeError::LoopLimit { .. } => "rule:loop".into(),
                CodeError::Timeout { .. } => "TimeoutError".into(),
                CodeError::MemoryLimit { .. } => "MemoryError".into(),
                CodeError::Value { .. } => "value-error".into(),
                other => format!("{other:?}"),
            };
            Outcome {
                class,
                value: Value::Null,
                stdout: f.stdout,
            }
        }
        Err(other) => Outcome {
            class: format!("error: {other}"),
            value: Value::Null,
            stdout: String::new(),
        },
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir: PathBuf = std::env::args()
        .nth(1)
        .ok_or("usage: monty_conformance DIR (a directory of .py test cases)")?
        .into();
    let dir = dir.canonicalize()?;
    let client = Client::connect().await?;
    // The reference runs on Monty's Python package, in the same image.
    let image = dockhand::ImageSpec::default()
        .pip([dockhand::codemode::MONTY_PACKAGE])
        .trust_host_certificates();
    let policy = match std::env::var("DOCKHAND_POLICY").as_deref() {
        Ok("strict") => CodePolicy::Strict,
        _ => CodePolicy::Default,
    };
    let host = client.code_host(CodeHostConfig::default().image(image).policy(policy));
    host.start().await?;
    let image = host.describe().image.ok_or("the code host has no image")?;

    let reference = std::process::Command::new("docker")
        .args(["run", "--rm", "--network", "none", "-v"])
        .arg(format!("{}:/cases:ro", dir.display()))
        .args([&image, "python3", "-c", REFERENCE])
        .output()?;
    if !reference.status.success() {
        return Err(String::from_utf8_lossy(&reference.stderr)
            .into_owned()
            .into());
    }
    let mut expected = BTreeMap::new();
    for line in String::from_utf8_lossy(&reference.stdout).lines() {
        let v: Value = serde_json::from_str(line)?;
        let name = v["name"].as_str().unwrap_or_default().to_string();
        expected.insert(
            name,
            Outcome {
                class: v["class"].as_str().unwrap_or("ok").to_string(),
                value: v.get("value").cloned().unwrap_or(Value::Null),
                stdout: v["stdout"].as_str().unwrap_or_default().to_string(),
            },
        );
    }

    let (mut same, mut by_rule, mut differ) = (0, BTreeMap::<String, u32>::new(), Vec::new());
    for (name, want) in &expected {
        let code = std::fs::read_to_string(dir.join(name))?;
        let got = dockhand_outcome(host.execute(&code, json!({}), &Toolset::new()).await);
        if &got == want {
            same += 1;
        } else if got.class.starts_with("rule:") {
            *by_rule.entry(got.class.clone()).or_default() += 1;
        } else {
            differ.push((name.clone(), want, got));
        }
    }
    for (name, want, got) in &differ {
        println!("DIFFERS {name}:\n  monty:    {want:?}\n  dockhand: {got:?}");
    }
    let passing = expected.values().filter(|o| o.class == "ok").count();
    println!(
        "{} cases ({passing} complete without an exception in plain Monty): {same} same through dockhand, {} stopped by dockhand's rules {by_rule:?}, {} differ",
        expected.len(),
        by_rule.values().sum::<u32>(),
        differ.len()
    );
    host.close().await?;
    Ok(())
}
