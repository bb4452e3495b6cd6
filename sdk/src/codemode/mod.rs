//! Code mode ("programmatic tool calling"): an LLM writes one block of Python
//! that calls tools; it runs in a sandbox; only its printed output and the
//! value of its last expression come back.
//!
//! One long-lived, hardened container ([`CodeHost`]) runs the runner from
//! `images/codehost/`. Each execution runs in a fresh pre-forked process, after
//! the code is checked (no imports, dunders or dangerous builtins; small
//! literals) and rewritten (loop guards, tool calls). A tool call pauses the
//! code; the host runs the tool (a Rust handler, or a one-shot sandbox in its
//! own container) and the code resumes with the result. Gathered calls run
//! concurrently on the host.
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
mod errors;
mod host;
pub mod protocol;
mod tools;

pub use crate::lifecycle::State;
pub use agent::{run_agent, AgentOutcome, AgentTurn, CodeGenerator};
pub use errors::{CodeError, CodeFailure};
pub use host::{CodeHost, CodeHostConfig, CodeSession, Execution, HostDescription, RUNNER};
pub use tools::{
    check as check_schema, ParamType, Tool, ToolCallRecord, ToolFuture, ToolParam, Toolset,
    LANGUAGE_RULES,
};

#[cfg(test)]
mod runner_rules {
    //! The runner's AST rules, checked with the host's python3 (no Docker);
    //! skipped where the host has none.

    use std::process::Command;

    /// `(rule or "ok")` for each snippet, from the runner's own `prepare`.
    fn rules(snippets: &[&str]) -> Option<Vec<String>> {
        let dir = tempfile::tempdir().ok()?;
        std::fs::write(dir.path().join("runner.py"), super::RUNNER).ok()?;
        let driver = "import json, sys\nimport runner\nout = []\nfor code in json.load(sys.stdin):\n    try:\n        runner.prepare(code, ['tool'])\n        out.append('ok')\n    except runner.Rejected as e:\n        out.append(e.rule)\nprint(json.dumps(out))\n";
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

    #[test]
    fn blocked_and_allowed_constructs() {
        let cases = [
            ("import os", "import"),
            ("from os import path", "import"),
            ("x.__class__", "dunder"),
            ("__name__", "dunder"),
            ("eval('1')", "builtin"),
            ("open('f')", "builtin"),
            ("getattr(x, 'y')", "builtin"),
            ("_dh_tick = 1", "reserved"),
            ("g.gi_frame", "attribute"),
            ("'{0.__class__}'.format(1)", "dunder"),
            ("x = (", "syntax"),
            ("x = [i * 2 for i in range(3)]\nx", "ok"),
            (
                "r = await tool(1)\nrs = await gather(tool(1), tool(2))",
                "ok",
            ),
            (
                "try:\n    tool()\nexcept ToolError as e:\n    print(e)",
                "ok",
            ),
            ("def f(a, *args, **kw):\n    return a\nf(1)", "ok"),
        ];
        let snippets: Vec<&str> = cases.iter().map(|(c, _)| *c).collect();
        if Command::new("python3").arg("--version").output().is_err() {
            return; // no host python: the integration tests cover the rules
        }
        let got = rules(&snippets).expect("the runner's rules ran under the host python");
        for ((code, want), got) in cases.iter().zip(&got) {
            assert_eq!(got, want, "for {code:?}");
        }
        let long = format!("s = '{}'", "x".repeat(10_001));
        assert_eq!(rules(&[&long]).expect("ran"), ["literal_size"]);
    }
}
