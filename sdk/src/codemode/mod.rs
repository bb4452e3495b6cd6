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
//! On top of that: type checking against the tools' stubs before anything
//! runs ([`CodeHostConfig::type_check`]); tools that need approval, whose
//! calls stop the execution as a sealed, durable [`Suspended`] that any
//! host sharing the [`SuspensionStore`] resumes once ([`CodeHost::resume`]);
//! `search_tools` and `describe_tool` past [`Toolset::DEFAULT_FULL_LISTING`]
//! tools; and MCP servers' tools as code-mode tools (`McpServer`, feature
//! `mcp`). See `docs/codemode.md`.
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
mod discovery;
mod durable;
mod errors;
mod handles;
mod hints;
mod host;
mod inputs;
mod kept;
mod launch;
#[cfg(feature = "mcp")]
mod mcp;
mod modules;
mod mounts;

mod offer;
#[cfg(feature = "kubernetes")]
pub(crate) mod on_cluster;
pub(crate) mod protocol;
mod schema;
mod session;
mod skill_runs;
mod skills;
mod suspension;
mod tools;
mod toolset;
mod typed;

pub use crate::error::{CodeError, CodeFailure, ToolCallRecord};
pub use crate::image::bridge::MONTY_PACKAGE;
pub use crate::lifecycle::State;
pub use agent::{run_agent, AgentOutcome, AgentTurn, CodeGenerator};
pub use config::{CodeHostConfig, CodePolicy, Execution, HostDescription, StrictRule, StrictRules};
pub use discovery::{DESCRIBE_TOOL, SEARCH_TOOLS};
pub use host::CodeHost;
pub use kept::ResultFile;
#[cfg(feature = "mcp")]
pub use mcp::McpServer;
pub use modules::{ToolModule, LIST_MODULES, READ_MODULE, TOOLS_MODULE};
pub use mounts::{MountMode, DEFAULT_MOUNTS_SIZE};
pub use schema::check as check_schema;
pub use session::CodeSession;
pub use skills::{Skill, SkillStore, SAVE_SKILL, SKILLS_MODULE};
pub use suspension::{Decision, Suspended, SuspensionStore, SUSPENSION_DIR_ENV};
pub use tools::{ParamType, Tool, ToolFuture, ToolParam};
pub use toolset::{Listing, Toolset, LANGUAGE_RULES, STRICT_LANGUAGE_RULES};
pub use typed::{BigInt, CodeValue, NotAnInt};
