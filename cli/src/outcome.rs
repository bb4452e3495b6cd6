//! Exit codes and error output: a run's exit code passes through, as
//! `docker run` does, and dockhand's own failures have codes of their own.

use std::process::ExitCode;

use dockhand::Error;

/// Bad usage or input (clap uses 2 for bad flags too).
pub const USAGE: u8 = 2;
/// The time limit passed (as `timeout(1)`).
pub const TIMEOUT: u8 = 124;
/// dockhand or the daemon failed (as `docker run` does for its own errors).
pub const INTERNAL: u8 = 125;

/// An error a session's keeper met, with the exit code it means there.
#[derive(Debug)]
pub struct Relayed {
    pub message: String,
    pub exit_code: u8,
}

impl std::fmt::Display for Relayed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Relayed {}

/// The exit code for an error.
pub fn code_of(e: &anyhow::Error) -> u8 {
    if let Some(relayed) = e.downcast_ref::<Relayed>() {
        return relayed.exit_code;
    }
    e.downcast_ref::<Error>().map_or(USAGE, code_of_error)
}

pub fn code_of_error(e: &Error) -> u8 {
    match e {
        Error::NonZeroExit { exit_code, .. } => u8::try_from(*exit_code).unwrap_or(1).max(1),
        Error::Killed { signal, .. } => u8::try_from(128 + signal).unwrap_or(137),
        Error::OutOfMemory { .. } | Error::ProcessLimit { .. } => 137,
        Error::Timeout { .. }
        | Error::CommandTimeout { .. }
        | Error::Kernel(dockhand::kernel::KernelError::Timeout { .. }) => TIMEOUT,
        Error::Kernel(dockhand::kernel::KernelError::Died {
            out_of_memory: true,
            ..
        }) => 137,
        Error::InvalidSpec { .. }
        | Error::MissingInput { .. }
        | Error::UnknownInput { .. }
        | Error::InputType { .. }
        | Error::InvalidPackage { .. }
        | Error::UnsupportedPython { .. }
        | Error::SuspensionRefused { .. } => USAGE,
        Error::RetriesExhausted { last, .. } => code_of_error(last),
        Error::Code(_) => 1,
        _ => INTERNAL,
    }
}

/// Prints the error (as JSON with `--json`) and gives its exit code.
pub fn fail(e: &anyhow::Error, json: bool) -> ExitCode {
    let code = code_of(e);
    if json {
        let kind = e
            .downcast_ref::<Error>()
            .map(|e| {
                format!("{e:?}")
                    .split([' ', '{', '('])
                    .next()
                    .unwrap_or("")
                    .to_string()
            })
            .unwrap_or_else(|| "Usage".into());
        let body = serde_json::json!({"error": format!("{e:#}"), "kind": kind, "exit_code": code});
        println!("{body}");
    } else {
        eprintln!("dockhand: {e:#}");
    }
    ExitCode::from(code)
}

/// A failed run's one-line cause, for when its output was already shown
/// live: the error's own text would print its stderr a second time. Hints
/// speak in this command's flags. `None` for errors that carry no output.
pub fn after_streamed_output(e: &Error) -> Option<String> {
    let line = match e {
        Error::NonZeroExit {
            exit_code,
            python,
            hint,
            ..
        } => {
            let what = match python {
                Some(py) => format!("the code raised {py} (exit code {exit_code})"),
                None => format!("the program exited with code {exit_code}"),
            };
            match hint {
                Some(h) => format!("{what}\nhint: {}", in_shell_terms(h)),
                None => what,
            }
        }
        Error::OutOfMemory { limit_bytes, .. } => format!(
            "out of memory: killed after exceeding its memory limit of {} MiB; raise it with --memory 2g",
            limit_bytes >> 20
        ),
        Error::Killed { signal, .. } => format!("the program was killed by signal {signal}"),
        Error::FileTooLarge { limit_bytes, .. } => format!(
            "a file the program wrote reached the limit of {limit_bytes} bytes per file"
        ),
        Error::RetriesExhausted { attempts, last } => {
            let last = after_streamed_output(last).unwrap_or_else(|| last.to_string());
            format!("all {} attempts failed; last: {last}", attempts.len())
        }
        _ => return None,
    };
    Some(line)
}

/// The SDK's hints name builder methods; this command has flags instead.
fn in_shell_terms(hint: &str) -> String {
    hint.replace("`.network(Network::Bridge)` on the sandbox", "--network")
        .replace("`.memory(\"2Gi\")`", "--memory 2g")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_failure_is_summed_up_without_its_stderr() {
        let e = Error::NonZeroExit {
            exit_code: 3,
            stderr_tail: "boom on stderr".into(),
            stdout_tail: String::new(),
            python: None,
            hint: Some("it needs `.network(Network::Bridge)` on the sandbox".into()),
        };
        let line = after_streamed_output(&e).unwrap();
        assert!(!line.contains("boom"), "{line}");
        assert!(
            line.contains("code 3") && line.contains("--network"),
            "{line}"
        );
        assert!(!line.contains(".network("), "{line}");
        let oom = Error::OutOfMemory {
            limit_bytes: 64 << 20,
            stdout_tail: String::new(),
            stderr_tail: "Killed".into(),
        };
        let line = after_streamed_output(&oom).unwrap();
        assert!(
            line.contains("--memory 2g") && !line.contains(".memory("),
            "{line}"
        );
    }
}
