//! What a failed code-mode execution reports ([`Error::Code`](super::Error::Code)):
//! defined here, beside the error they travel in, and re-exported by
//! [`codemode`](crate::codemode).

use std::fmt;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

/// A record of one tool call made by the code.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ToolCallRecord {
    /// The tool.
    pub name: String,
    /// Its arguments, by name (as given when they could not be bound).
    pub args: Value,
    /// How long the host took.
    pub duration: Duration,
    /// Whether it succeeded.
    pub ok: bool,
    /// The error message, when it failed.
    pub error: Option<String>,
}

/// Why an execution failed. Each variant renders (via `Display`) as a short
/// text meant to be fed back to the model that wrote the code.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CodeError {
    /// The code broke a sandbox rule, did not parse, or failed type checking,
    /// before it ran.
    Validation {
        /// The rule (`import`, `dunder`, `builtin`, `literal_size`, `reserved`,
        /// `nesting`, `code_size`, `syntax`, or `type` for a type-check error).
        rule: String,
        /// What was wrong.
        message: String,
        /// Line (1-based).
        line: u32,
        /// Column (1-based).
        col: u32,
    },
    /// The code raised an exception.
    Runtime {
        /// Exception class.
        exception_type: String,
        /// Its message.
        message: String,
        /// Line where it was raised (0 when unknown).
        line: u32,
        /// Column where it was raised (0 when unknown).
        col: u32,
    },
    /// A tool call failed and the code did not catch it.
    Tool {
        /// The tool's message.
        message: String,
        /// Line of the call.
        line: u32,
    },
    /// The execution ran past its time limit.
    Timeout {
        /// The limit.
        limit: Duration,
    },
    /// The execution used more memory than its limit.
    MemoryLimit {
        /// Details.
        message: String,
    },
    /// A loop ran more iterations than allowed.
    LoopLimit {
        /// Details.
        message: String,
        /// Line of the loop.
        line: u32,
    },
    /// The final value was too large to return.
    OutputLimit {
        /// Details.
        message: String,
    },
    /// The final value cannot be returned as JSON (bytes, NaN, a function, ...).
    Value {
        /// What was wrong with it.
        message: String,
    },
    /// The code made more tool calls than one execution may.
    ToolLimit {
        /// Details.
        message: String,
    },
    /// A REPL session could not be opened: too many are open on the host.
    SessionLimit {
        /// Details.
        message: String,
    },
    /// The code called a tool that needs approval while holding more state
    /// than a suspended execution may keep (see
    /// [`SuspensionStore::max_state_bytes`](crate::codemode::SuspensionStore::max_state_bytes)).
    SuspendLimit {
        /// Details.
        message: String,
    },
    /// The execution's process died unexpectedly (or the runner did).
    Crashed {
        /// Details.
        message: String,
    },
}

impl fmt::Display for CodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodeError::Validation {
                rule,
                message,
                line,
                col,
            } if rule == "type" => {
                write!(f, "TypeCheckError at line {line}, column {col}: {message}")
            }
            CodeError::Validation {
                rule,
                message,
                line,
                col,
            } => {
                write!(
                    f,
                    "ValidationError ({rule}) at line {line}, column {col}: {message}"
                )
            }
            CodeError::Runtime {
                exception_type,
                message,
                line,
                ..
            } => {
                write!(f, "{exception_type} at line {line}: {message}")
            }
            CodeError::Tool { message, line } => write!(f, "ToolError at line {line}: {message}"),
            CodeError::Timeout { limit } => write!(
                f,
                "TimeoutError: the code ran longer than {:.1}s; do less work or fewer tool calls",
                limit.as_secs_f64()
            ),
            CodeError::MemoryLimit { message } => {
                write!(f, "MemoryError: {message}; use less data at once")
            }
            CodeError::LoopLimit { message, line } => {
                write!(
                    f,
                    "LoopLimitError at line {line}: {message}; loop over less data"
                )
            }
            CodeError::OutputLimit { message } => {
                write!(f, "OutputLimitError: {message}; return a summary instead")
            }
            CodeError::Value { message } => write!(
                f,
                "ValueError: {message}; end with a JSON-like value (dict, list, str, number, bool, None)"
            ),
            CodeError::ToolLimit { message } => {
                write!(f, "ToolLimitError: {message}; batch the work into fewer calls")
            }
            CodeError::SessionLimit { message } => write!(f, "SessionLimitError: {message}"),
            CodeError::SuspendLimit { message } => write!(f, "SuspendLimitError: {message}"),
            CodeError::Crashed { message } => write!(f, "CrashError: {message}"),
        }
    }
}

/// A failed execution: the error plus what the code did before it failed.
#[derive(Debug, Clone, PartialEq)]
pub struct CodeFailure {
    /// What went wrong.
    pub error: CodeError,
    /// `print()` output up to the failure.
    pub stdout: String,
    /// Whether that output was cut at the limit.
    pub stdout_truncated: bool,
    /// Tool calls made before the failure.
    pub tool_calls: Vec<ToolCallRecord>,
}

impl CodeFailure {
    /// A short text for the model: the error, and the printed output if any.
    pub fn feedback(&self) -> String {
        if self.stdout.trim().is_empty() {
            self.error.to_string()
        } else {
            format!("{}\nprinted before the error:\n{}", self.error, self.stdout)
        }
    }
}

impl fmt::Display for CodeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "code failed: {}", self.error)
    }
}
