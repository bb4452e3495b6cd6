//! A code host's settings and what it reports.

use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use super::protocol::BridgeConfig;
use super::toolset::ToolCallRecord;
use crate::image::ImageSpec;
use crate::lifecycle::State;

/// Settings of a code host: the container's limits and each execution's.
///
/// Every execution limit is enforced by Monty inside the container (time,
/// memory, recursion, tool calls) or by the bridge (wall-clock time with tool
/// calls, loops, printed output, the final value); the host adds its own
/// deadline in case the container stops answering.
#[derive(Debug, Clone, PartialEq)]
pub struct CodeHostConfig {
    /// The image. Monty (`pydantic-monty`, pinned) is added to it when it is
    /// built; a prebuilt image must have it installed.
    pub image: ImageSpec,
    /// CPUs of the container.
    pub cpus: f64,
    /// Memory of the whole container, in bytes.
    pub memory_bytes: i64,
    /// Processes of the whole container.
    pub pids: i64,
    /// Wall-clock limit of one execution (tool calls included).
    pub exec_timeout: Duration,
    /// Monty's heap limit for one execution, in bytes.
    pub exec_memory_bytes: i64,
    /// How deep calls may nest (Monty's recursion limit).
    pub recursion_limit: u32,
    /// Iterations any single loop may run.
    pub loop_limit: u64,
    /// Tool calls one execution may make.
    pub max_tool_calls: u64,
    /// Characters of `print()` output kept per execution.
    pub print_limit: usize,
    /// Bytes of JSON the final value may take.
    pub value_limit: usize,
    /// REPL sessions ([`CodeHost::session`](super::CodeHost::session)) open at once.
    pub max_sessions: u32,
    /// Type-check each execution against the tools' stubs before it runs
    /// (Monty's checker); a type error comes back as
    /// [`CodeError::Validation`](super::CodeError::Validation) with rule `type`. Tools are declared `async`
    /// for the checker, so checked code calls them with `await`.
    pub type_check: bool,
    /// How long starting may take.
    pub start_timeout: Duration,
}

impl Default for CodeHostConfig {
    fn default() -> Self {
        CodeHostConfig {
            // pip reaches PyPI through whatever TLS interception the host trusts.
            image: ImageSpec::default().trust_host_certificates(),
            cpus: 1.0,
            memory_bytes: 1 << 30,
            pids: 256,
            exec_timeout: Duration::from_secs(30),
            exec_memory_bytes: 256 << 20,
            recursion_limit: 200,
            loop_limit: 10_000,
            max_tool_calls: 10_000,
            print_limit: 16 * 1024,
            value_limit: 1 << 20,
            max_sessions: 8,
            type_check: false,
            start_timeout: Duration::from_secs(300),
        }
    }
}

impl CodeHostConfig {
    pub(crate) fn bridge(&self) -> BridgeConfig {
        BridgeConfig {
            timeout_s: self.exec_timeout.as_secs_f64(),
            memory_bytes: self.exec_memory_bytes,
            recursion_limit: self.recursion_limit,
            loop_limit: self.loop_limit,
            print_limit: self.print_limit,
            value_limit: self.value_limit,
            max_tool_calls: self.max_tool_calls,
            max_sessions: self.max_sessions,
        }
    }

    /// The host's own deadline for one execution: the bridge answers at the
    /// limit; past this the container is taken to have stopped answering.
    pub(crate) fn deadline(&self) -> Duration {
        self.exec_timeout + (self.exec_timeout / 8).max(Duration::from_millis(250))
    }
}

/// A successful execution.
#[derive(Debug, Clone, PartialEq)]
pub struct Execution {
    /// The value of the code's last expression (`null` when it ends in a statement).
    pub value: Value,
    /// Captured `print()` output.
    pub stdout: String,
    /// Whether it was cut at the limit.
    pub stdout_truncated: bool,
    /// The tool calls made, in the order they finished.
    pub tool_calls: Vec<ToolCallRecord>,
    /// Wall time of the execution.
    pub duration: Duration,
}

/// What [`CodeHost::describe`](super::CodeHost::describe) reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostDescription {
    /// The container id, while there is one.
    pub container_id: Option<String>,
    /// The lifecycle state.
    pub state: State,
    /// The image reference (once started).
    pub image: Option<String>,
    /// CPUs of the container.
    pub cpus: f64,
    /// Memory of the container.
    pub memory_bytes: i64,
    /// Execution time limit.
    pub exec_timeout: Duration,
    /// Execution memory limit.
    pub exec_memory_bytes: i64,
    /// Executions completed (successful or not).
    pub executions: u64,
    /// Sandbox-tool results whose File and Dir outputs the host still holds:
    /// only those of running executions and open REPL sessions.
    pub held_results: usize,
    /// Why the host is in `error`, if it is.
    pub last_error: Option<String>,
}
