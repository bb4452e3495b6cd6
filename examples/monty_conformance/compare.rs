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
pub const PLAIN_MONTY: &str = concat!(include_str!("exact.py"), include_str!("reference.py"));

/// Runs every case in CPython (a fresh interpreter each), printing one JSON
/// line per case; cases that need the suite's external functions, or that
/// the suite marks as failing on CPython, come out as `skip`.
pub const CPYTHON: &str = concat!(
    "EXACT = r\'\'\'",
    include_str!("exact.py"),
    "\'\'\'\n",
    include_str!("cpython.py")
);

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
#[derive(Debug, Clone, PartialEq)]
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
    /// The code host's outcome of every case.
    pub outcomes: BTreeMap<String, Outcome>,
}

/// How the code host compared with CPython, on the cases where CPython and
/// plain Monty agree (Monty's suite is written to run on both, but some of
/// it needs a newer CPython than the image's, or Monty's own external
/// functions).
#[derive(Debug, Default)]
pub struct CpythonReport {
    /// Cases CPython ran (not skipped).
    pub ran: usize,
    /// Of those, cases where CPython and plain Monty agree.
    pub compared: usize,
    /// Of those, cases where the code host agrees too.
    pub same: usize,
    /// The compared cases where the code host differs: (case, CPython, code host).
    pub differ: Vec<(String, Outcome, Outcome)>,
}

/// Compares the code host's outcomes with CPython's where CPython and plain
/// Monty agree.
pub fn against_cpython(
    cpython: &BTreeMap<String, Outcome>,
    monty: &BTreeMap<String, Outcome>,
    host: &BTreeMap<String, Outcome>,
) -> CpythonReport {
    let mut report = CpythonReport::default();
    for (name, want) in cpython {
        if want.class == "skip" {
            continue;
        }
        report.ran += 1;
        if monty.get(name) != Some(want) {
            continue;
        }
        report.compared += 1;
        match host.get(name) {
            Some(got) if got == want => report.same += 1,
            got => report.differ.push((
                name.clone(),
                want.clone(),
                got.cloned().unwrap_or_else(|| Outcome {
                    class: "not run".into(),
                    value: Value::Null,
                    stdout: String::new(),
                }),
            )),
        }
    }
    report
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

/// The outcome of every case in `dir` under `script` ([`PLAIN_MONTY`] or
/// [`CPYTHON`]), run in `image` (which has `pydantic-monty`), offline, with
/// [`MONTY_TEST_ENV`] set.
pub fn reference(
    script: &str,
    image: &str,
    dir: &Path,
) -> Result<BTreeMap<String, Outcome>, String> {
    let mut docker = std::process::Command::new("docker");
    docker.args(["run", "--rm", "--network", "none"]);
    for (key, value) in MONTY_TEST_ENV {
        docker.arg("-e").arg(format!("{key}={value}"));
    }
    let out = docker
        .arg("-v")
        .arg(format!("{}:/cases:ro", dir.display()))
        .args([image, "python3", "-c", script])
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
    expected: &BTreeMap<String, Outcome>,
) -> std::io::Result<Report> {
    let mut report = Report {
        cases: expected.len(),
        passing: expected.values().filter(|o| o.class == "ok").count(),
        ..Report::default()
    };
    for (name, want) in expected {
        let code = std::fs::read_to_string(dir.join(name))?;
        let got = dockhand_outcome(host.execute(&code, json!({}), &Toolset::new()).await);
        if ANSWERED_BY_THE_HOST.contains(&name.as_str()) && got.class == "ok" {
            report.answered += 1;
        }
        if got == *want {
            report.same += 1;
        } else if got.class.starts_with("rule:") {
            *report.by_rule.entry(got.class.clone()).or_default() += 1;
        } else {
            report
                .differ
                .push((name.clone(), want.clone(), got.clone()));
        }
        report.outcomes.insert(name.clone(), got);
    }
    Ok(report)
}
