//! Runs a directory of Python test cases (Monty's own suite) in plain Monty
//! (pydantic-monty, inside the code host's image) and through a code host,
//! and compares each case's printed output, final value and exception
//! class. Values travel in the exact encoding on both sides, so an int past
//! 64 bits or a tuple is compared as itself. Shared by the
//! `monty_conformance` example and the test of the same name.

use std::collections::BTreeMap;
use std::path::Path;

use dockhand::codemode::{CodeError, CodeHost, Execution, Toolset};
use dockhand::Error;
use serde_json::{json, Value};

/// Runs every case in plain Monty (a fresh interpreter each, the same limits
/// as the code host), printing one JSON line per case.
const REFERENCE: &str = concat!(include_str!("exact.py"), include_str!("reference.py"));

/// The environment Monty's own suite runs its OS-call cases in. The code
/// host is given it (`CodeHostConfig::env`); plain Monty, with no OS handler,
/// raises on those calls.
pub const MONTY_TEST_ENV: [(&str, &str); 3] = [
    ("VIRTUAL_HOME", "/virtual/home"),
    ("VIRTUAL_USER", "testuser"),
    ("VIRTUAL_EMPTY", ""),
];

/// Cases that call `os.getenv`/`os.environ`: the code host answers them
/// (and must pass their own assertions), where plain Monty cannot.
pub const ANSWERED_BY_THE_HOST: [&str; 3] = ["import__os.py", "os__environ.py", "os_path__pure.py"];

/// Cases whose outcome the code host changes on purpose: its prelude makes
/// `asyncio` and `gather` available without an import.
pub const CHANGED_BY_THE_PRELUDE: [&str; 1] = ["async__not_imported.py"];

/// What one run of a case came to: its class (`ok` or an exception class),
/// its value and its printed output.
#[derive(Debug, PartialEq)]
pub struct Outcome {
    pub class: String,
    pub value: Value,
    pub stdout: String,
}

/// How the code host compared with plain Monty.
#[derive(Debug, Default)]
pub struct Report {
    /// Cases in the directory.
    pub cases: usize,
    /// Cases plain Monty completes without an exception.
    pub passing: usize,
    /// Same class, value and output.
    pub same: usize,
    /// Refused by a rule of the code host's policy, by rule.
    pub by_rule: BTreeMap<String, u32>,
    /// Of [`ANSWERED_BY_THE_HOST`], those the code host completed.
    pub answered: usize,
    /// The rest: (case, plain Monty, code host).
    pub differ: Vec<(String, Outcome, Outcome)>,
}

impl Report {
    /// Differences other than [`CHANGED_BY_THE_PRELUDE`] and the OS-call
    /// cases the code host completed.
    pub fn unexpected(&self) -> Vec<&(String, Outcome, Outcome)> {
        self.differ
            .iter()
            .filter(|(name, _, got)| {
                let on_purpose = CHANGED_BY_THE_PRELUDE.contains(&name.as_str());
                let answered = ANSWERED_BY_THE_HOST.contains(&name.as_str()) && got.class == "ok";
                !(on_purpose || answered)
            })
            .collect()
    }
}

fn dockhand_outcome(result: dockhand::Result<Execution>) -> Outcome {
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

/// Plain Monty's outcome of every case in `dir`, run in `image` (which has
/// `pydantic-monty`), offline.
pub fn reference(image: &str, dir: &Path) -> Result<BTreeMap<String, Outcome>, String> {
    let out = std::process::Command::new("docker")
        .args(["run", "--rm", "--network", "none", "-v"])
        .arg(format!("{}:/cases:ro", dir.display()))
        .args([image, "python3", "-c", REFERENCE])
        .output()
        .map_err(|e| format!("docker run: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let mut expected = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let v: Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
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
    Ok(expected)
}

/// Runs every case through `host` (with exact values on) and compares.
pub async fn compare(
    host: &CodeHost,
    dir: &Path,
    expected: BTreeMap<String, Outcome>,
) -> std::io::Result<Report> {
    let mut report = Report {
        cases: expected.len(),
        passing: expected.values().filter(|o| o.class == "ok").count(),
        ..Report::default()
    };
    for (name, want) in expected {
        let code = std::fs::read_to_string(dir.join(&name))?;
        let got = dockhand_outcome(host.execute(&code, json!({}), &Toolset::new()).await);
        if ANSWERED_BY_THE_HOST.contains(&name.as_str()) && got.class == "ok" {
            report.answered += 1;
        }
        if got == want {
            report.same += 1;
        } else if got.class.starts_with("rule:") {
            *report.by_rule.entry(got.class.clone()).or_default() += 1;
        } else {
            report.differ.push((name, want, got));
        }
    }
    Ok(report)
}
