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

/// The exit code for an error.
pub fn code_of(e: &anyhow::Error) -> u8 {
    e.downcast_ref::<Error>().map_or(USAGE, code_of_error)
}

fn code_of_error(e: &Error) -> u8 {
    match e {
        Error::NonZeroExit { exit_code, .. } => u8::try_from(*exit_code).unwrap_or(1).max(1),
        Error::Killed { signal, .. } => u8::try_from(128 + signal).unwrap_or(137),
        Error::OutOfMemory { .. } | Error::ProcessLimit { .. } => 137,
        Error::Timeout { .. } | Error::CommandTimeout { .. } => TIMEOUT,
        Error::InvalidSpec { .. }
        | Error::MissingInput { .. }
        | Error::UnknownInput { .. }
        | Error::InputType { .. }
        | Error::InvalidPackage { .. }
        | Error::UnsupportedPython { .. } => USAGE,
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
