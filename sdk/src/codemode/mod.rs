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
pub mod lifecycle;
pub mod protocol;
mod tools;

pub use agent::{run_agent, AgentOutcome, AgentTurn, CodeGenerator};
pub use errors::{CodeError, CodeFailure};
pub use host::{CodeHost, CodeHostConfig, CodeSession, Execution, HostDescription, RUNNER};
pub use lifecycle::State;
pub use tools::{
    check as check_schema, ParamType, Tool, ToolCallRecord, ToolFuture, ToolParam, Toolset,
    LANGUAGE_RULES,
};
