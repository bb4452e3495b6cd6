//! What can go wrong in code mode, in words a model can act on.

use std::time::Duration;

use super::config::Execution;
use super::protocol::{ExecResult, RunnerError};
use crate::error::ToolCallRecord;
use crate::error::{CodeError, CodeFailure};

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
