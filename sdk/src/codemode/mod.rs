//! Code mode ("programmatic tool calling"): an LLM writes one block of Python
//! that calls tools; it runs in a sandbox; only its printed output and the
//! value of its last expression come back.
//!
//! One long-lived, hardened, offline container ([`CodeHost`]) runs Monty,
//! pydantic's Python interpreter for LLM-written code, behind a small bridge
//! (`sdk/images/codehost/`). Monty is the boundary inside the container: it has no
//! filesystem, network, environment or process access, and its time, memory
//! and recursion limits cannot be caught. The container is the boundary
//! outside it. Every execution runs in a fresh Monty interpreter.
//!
//! A tool call pauses the code (a Monty external function call); the host
//! runs the tool (a Rust handler, or a one-shot sandbox in its own container,
//! where full Python is available) and the code resumes with the result.
//! Awaited and gathered calls run concurrently on the host.
//!
//! Rules dockhand adds on top of Monty, as product features with clear
//! errors ([`CodeError::Validation`]): imports limited to the modules offered,
//! no dunder names or attributes (classes may still define `__init__`), no
//! `eval`/`exec`/`compile`/`open`/`input`/`breakpoint`, no `_dh` names,
//! literals up to 10,000 characters, and a loop guard (10,000 iterations per
//! `for` loop entered, per `while` loop in one execution; configurable).
//! Code that the bridge's own parser cannot read goes to Monty unchecked.
//!
//! ```no_run
//! # async fn demo() -> dockhand::Result<()> {
//! use dockhand::codemode::{CodeHostConfig, ParamType, Tool, Toolset};
//! let client = dockhand::Client::connect().await?;
//! let tools = Toolset::new().tool(
//!     Tool::new("square", "Squares x.")
//!         .param("x", ParamType::Float, "a number")
//!         .returns("float")
//!         .handler(|a| async move { Ok(serde_json::json!(a["x"].as_f64().unwrap_or(0.0).powi(2))) }),
//! );
//! println!("{}", tools.prompt()); // paste into the system prompt
//! let host = client.code_host(CodeHostConfig::default());
//! let run = host
//!     .execute("xs = await gather(square(1), square(2))\nsum(xs)", serde_json::json!({}), &tools)
//!     .await?;
//! assert_eq!(run.value, 5.0);
//! # Ok(()) }
//! ```

mod agent;
mod bridge;
mod channel;
mod config;
mod errors;
mod handles;
mod host;
mod native;
pub(crate) mod protocol;
mod schema;
mod tools;
mod toolset;

pub use crate::lifecycle::State;
pub use agent::{run_agent, AgentOutcome, AgentTurn, CodeGenerator};
pub use bridge::MONTY_PACKAGE;
#[cfg(test)]
use bridge::RULES;
#[cfg(feature = "kubernetes")]
pub(crate) use bridge::{host_spec, PROGRAMS};
pub use config::{CodeHostConfig, Execution, HostDescription};
pub use errors::{CodeError, CodeFailure};
pub use host::{CodeHost, CodeSession};
pub use schema::check as check_schema;
pub use tools::{ParamType, Tool, ToolFuture, ToolParam};
pub use toolset::{ToolCallRecord, Toolset, LANGUAGE_RULES};

#[cfg(test)]
mod rules_checks {
    //! The bridge's product rules (`sdk/images/codehost/rules.py`), checked with
    //! the host's python3 (no Docker); skipped where the host has none.

    use std::process::Command;

    /// For each snippet: `["ok", fed code, sync call offsets]` or `[rule, line, col]`.
    fn prepare(snippets: &[&str]) -> Option<Vec<serde_json::Value>> {
        let dir = tempfile::tempdir().ok()?;
        std::fs::write(dir.path().join("rules.py"), super::RULES).ok()?;
        let driver = "import json, sys\nimport rules\nout = []\nfor code in json.load(sys.stdin):\n    try:\n        p = rules.prepare(code, ['tool'])\n        out.append(['ok', p.code, sorted(p.sync_calls)])\n    except rules.Rejected as e:\n        out.append([e.rule, e.line, e.col])\nprint(json.dumps(out))\n";
        let mut child = Command::new("python3")
            .arg("-c")
            .arg(driver)
            .current_dir(dir.path())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .ok()?;
        serde_json::to_writer(child.stdin.take()?, snippets).ok()?;
        let out = child.wait_with_output().ok()?;
        serde_json::from_slice(&out.stdout).ok()
    }

    fn host_python() -> bool {
        Command::new("python3").arg("--version").output().is_ok()
    }

    #[test]
    fn rules_reject_with_rule_line_and_column() {
        if !host_python() {
            return; // the integration tests cover the rules
        }
        let cases = [
            ("import os", "import", 1, 1),
            ("x = 1\nfrom subprocess import run", "import", 2, 1),
            ("y = ().__class__", "dunder", 1, 5),
            ("__builtins__", "dunder", 1, 1),
            ("eval('1')", "builtin", 1, 1),
            ("open('/etc/passwd')", "builtin", 1, 1),
            ("_dh_loop = 1", "reserved", 1, 1),
            ("'{0.__class__}'.format(1)", "dunder", 1, 1),
            ("def f(__x__):\n    return 1", "dunder", 1, 7),
        ];
        let snippets: Vec<&str> = cases.iter().map(|c| c.0).collect();
        let got = prepare(&snippets).expect("the rules ran under the host python");
        for ((code, rule, line, col), got) in cases.iter().zip(&got) {
            assert_eq!(got, &serde_json::json!([rule, line, col]), "for {code:?}");
        }
        let long = format!("s = '{}'", "x".repeat(10_001));
        assert_eq!(prepare(&[&long]).expect("ran")[0][0], "literal_size");
    }

    #[test]
    fn classes_may_define_special_methods_and_call_super() {
        if !host_python() {
            return;
        }
        let code = "class P:\n    def __init__(self):\n        super().__init__()\n    def __enter__(self):\n        return self";
        let got = prepare(&[code]).expect("ran");
        assert_eq!(got[0][0], "ok", "{got:?}");
        assert_eq!(got[0][1], code, "nothing to rewrite");
    }

    #[test]
    fn loops_are_guarded_in_place_and_lines_keep_their_numbers() {
        if !host_python() {
            return;
        }
        let code = "xs = [i for i in range(3)]\nfor a in xs:\n    while a < 3:\n        a += 1";
        let got = prepare(&[code]).expect("ran");
        assert_eq!(
            got[0][1],
            "xs = [i for i in _dh_loop(range(3), 1)]\nfor a in _dh_loop(xs, 2):\n    while _dh_tick(1, 3) and (a < 3):\n        a += 1"
        );
        let nested = "for a in [b for b in c]:\n    pass";
        assert_eq!(
            prepare(&[nested]).expect("ran")[0][1],
            "for a in _dh_loop([b for b in _dh_loop(c, 1)], 1):\n    pass"
        );
    }

    #[test]
    fn only_plain_tool_calls_are_synchronous() {
        if !host_python() {
            return;
        }
        // Byte offsets in the fed code: `tool(1)` at 4 is plain; the awaited and
        // gathered calls get futures; `é` takes two bytes.
        let code =
            "x = tool(1)\ny = await tool(2)\nz = await gather(tool(3), tool(4))\né = tool(5)";
        let got = prepare(&[code]).expect("ran");
        let sync_at = code.find("tool(5)").unwrap() as u64;
        assert_eq!(got[0][2], serde_json::json!([4, sync_at]));
    }

    #[test]
    fn code_python_cannot_parse_goes_to_monty_unchanged() {
        if !host_python() {
            return;
        }
        let got = prepare(&["x = (", "break"]).expect("ran");
        assert_eq!(got[0], serde_json::json!(["ok", "x = (", []]));
        assert_eq!(got[1][0], "ok");
    }
}
