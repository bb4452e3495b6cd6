//! What can go wrong in code mode, in words a model can act on.

use std::fmt;
use std::time::Duration;

use super::config::Execution;
use super::protocol::{ExecResult, RunnerError};
use super::toolset::ToolCallRecord;

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
    /// [`SuspensionStore::max_state_bytes`](super::SuspensionStore::max_state_bytes)).
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

impl CodeError {
    pub(crate) fn from_runner(e: &RunnerError, timeout: Duration) -> Self {
        let message = e.message.clone();
        match e.kind.as_str() {
            "validation" => CodeError::Validation {
                rule: e.rule.clone().unwrap_or_default(),
                message,
                line: e.line,
                col: e.col,
            },
            "tool" => CodeError::Tool {
                message,
                line: e.line,
            },
            "timeout" => CodeError::Timeout { limit: timeout },
            "memory" => CodeError::MemoryLimit { message },
            "loop_limit" => CodeError::LoopLimit {
                message,
                line: e.line,
            },
            "output_limit" => CodeError::OutputLimit { message },
            "value" => CodeError::Value { message },
            "tool_limit" => CodeError::ToolLimit { message },
            "session_limit" => CodeError::SessionLimit { message },
            "suspend_limit" => CodeError::SuspendLimit { message },
            "runtime" => CodeError::Runtime {
                exception_type: e
                    .exception_type
                    .clone()
                    .unwrap_or_else(|| "Exception".into()),
                message,
                line: e.line,
                col: e.col,
            },
            _ => CodeError::Crashed { message },
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

/// The caller's result of an execution the bridge answered.
pub(super) fn finish(
    result: ExecResult,
    calls: Vec<ToolCallRecord>,
    duration: Duration,
    timeout: Duration,
    files: Vec<super::ResultFile>,
) -> crate::error::Result<Execution> {
    if result.ok {
        return Ok(Execution {
            value: result.value,
            stdout: result.stdout,
            stdout_truncated: result.stdout_truncated,
            tool_calls: calls,
            duration,
            files,
            suspended: None,
        });
    }
    let error = result
        .error
        .as_ref()
        .map(|e| CodeError::from_runner(e, timeout))
        .unwrap_or(CodeError::Crashed {
            message: "the bridge reported a failure without details".into(),
        });
    Err(crate::Error::Code(Box::new(CodeFailure {
        error,
        stdout: result.stdout,
        stdout_truncated: result.stdout_truncated,
        tool_calls: calls,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runner_errors_map_to_distinct_variants() {
        let e = |kind: &str| RunnerError {
            kind: kind.into(),
            message: "m".into(),
            line: 3,
            ..Default::default()
        };
        let t = Duration::from_secs(2);
        assert!(matches!(
            CodeError::from_runner(&e("validation"), t),
            CodeError::Validation { line: 3, .. }
        ));
        assert!(matches!(
            CodeError::from_runner(&e("tool"), t),
            CodeError::Tool { .. }
        ));
        assert_eq!(
            CodeError::from_runner(&e("timeout"), t),
            CodeError::Timeout { limit: t }
        );
        assert!(matches!(
            CodeError::from_runner(&e("memory"), t),
            CodeError::MemoryLimit { .. }
        ));
        assert!(matches!(
            CodeError::from_runner(&e("loop_limit"), t),
            CodeError::LoopLimit { .. }
        ));
        assert!(matches!(
            CodeError::from_runner(&e("output_limit"), t),
            CodeError::OutputLimit { .. }
        ));
        assert!(matches!(
            CodeError::from_runner(&e("runtime"), t),
            CodeError::Runtime { .. }
        ));
        assert!(matches!(
            CodeError::from_runner(&e("crash"), t),
            CodeError::Crashed { .. }
        ));
        assert!(matches!(
            CodeError::from_runner(&e("value"), t),
            CodeError::Value { .. }
        ));
        assert!(matches!(
            CodeError::from_runner(&e("tool_limit"), t),
            CodeError::ToolLimit { .. }
        ));
        assert!(matches!(
            CodeError::from_runner(&e("session_limit"), t),
            CodeError::SessionLimit { .. }
        ));
        assert!(matches!(
            CodeError::from_runner(&e("suspend_limit"), t),
            CodeError::SuspendLimit { .. }
        ));
        let typed = RunnerError {
            rule: Some("type".into()),
            ..e("validation")
        };
        assert!(CodeError::from_runner(&typed, t)
            .to_string()
            .starts_with("TypeCheckError at line 3"));
    }

    #[test]
    fn feedback_is_short_and_actionable() {
        let f = CodeFailure {
            error: CodeError::Validation {
                rule: "import".into(),
                message: "imports are not allowed".into(),
                line: 1,
                col: 1,
            },
            stdout: String::new(),
            stdout_truncated: false,
            tool_calls: vec![],
        };
        assert_eq!(
            f.feedback(),
            "ValidationError (import) at line 1, column 1: imports are not allowed"
        );
        let f = CodeFailure {
            stdout: "step 1\n".into(),
            ..f
        };
        assert!(f
            .feedback()
            .ends_with("printed before the error:\nstep 1\n"));
    }
}
