//! How a run ended, told truthfully: out of memory, a value the runner could
//! not write, a signal, a file past its limit, an exception, or an exit code
//! the sandbox does not accept.

use super::capture::tail;
use super::outputs::RunnerStatus;
use super::preamble::INPUTS_DIR;
use super::spec::Program;
use super::traceback;
use crate::engine::ExitStatus;
use crate::error::{Error, PythonError, Result};
use crate::settings::{redact, redact_cut, Cut};
use crate::settings::{Network, Runtime};

/// How much of stdout and stderr a failed run's error carries.
pub(super) const TAIL_BYTES: usize = 4096;
/// The signal a write past `RLIMIT_FSIZE` raises.
const SIGXFSZ: i64 = 25;

/// What is known once a run's container has exited.
pub(super) struct Ended<'a> {
    pub status: &'a ExitStatus,
    pub report: Option<&'a RunnerStatus>,
    pub stdout: &'a str,
    pub stderr: &'a str,
    pub runtime: &'a Runtime,
    pub program: &'a Program,
    pub secrets: &'a [(String, String)],
}

/// `Ok` when the run succeeded, else the error that says how it ended.
pub(super) fn verdict(e: &Ended<'_>) -> Result<()> {
    if e.status.oom_killed {
        return Err(Error::OutOfMemory {
            limit_bytes: e.runtime.resources.memory_bytes,
            stdout_tail: tail(e.stdout, TAIL_BYTES),
            stderr_tail: tail(e.stderr, TAIL_BYTES),
        });
    }
    if let Some(report) = e.report {
        if let Some(name) = report.unassigned.as_ref().and_then(|u| u.first()) {
            return Err(Error::OutputNotAssigned { name: name.clone() });
        }
        if let Some(bad) = &report.bad_output {
            return Err(Error::BadOutput {
                name: bad.name.clone(),
                expected: bad.expected.clone(),
                // The runner cuts the value's repr at 200 characters.
                got: redact_cut(
                    &bad.got,
                    e.secrets,
                    Cut {
                        start: false,
                        end: true,
                    },
                ),
            });
        }
    }
    // The init reports a signal death as 128 + signal; a Python exception
    // (reported in the status file) is an exit, whatever its code.
    let python_raised = e.report.is_some_and(|s| s.error.is_some());
    let file_too_large = || Error::FileTooLarge {
        limit_bytes: e.runtime.outputs_limit,
        stderr_tail: tail(e.stderr, TAIL_BYTES),
        stdout_tail: tail(e.stdout, TAIL_BYTES),
    };
    // Exit codes the sandbox accepts (0, unless it says more) are success.
    if e.runtime.accepted_exit_codes.contains(&e.status.code) {
        return Ok(());
    }
    if e.status.code == 128 + SIGXFSZ && !python_raised {
        return Err(file_too_large());
    }
    if (129..=128 + 64).contains(&e.status.code) && !python_raised {
        return Err(Error::Killed {
            signal: e.status.code - 128,
            stderr_tail: tail(e.stderr, TAIL_BYTES),
            stdout_tail: tail(e.stdout, TAIL_BYTES),
        });
    }
    let script = format!(
        "{INPUTS_DIR}/{}/{}",
        crate::sandbox::preamble::CONTROL_DIR,
        crate::sandbox::preamble::MAIN_FILE
    );
    let python = match (e.report, e.program) {
        (Some(s), _) if s.error.is_some() => s.error.as_ref().map(|raised| PythonError {
            exception_type: raised.kind.clone(),
            message: redact(&raised.message, e.secrets),
            traceback: redact(&raised.traceback, e.secrets),
        }),
        (_, Program::Code { .. }) => traceback::parse_script(e.stderr, &script),
        _ => None,
    };
    if python
        .as_ref()
        .is_some_and(|p| p.exception_type == "OSError" && p.message.starts_with("[Errno 27]"))
    {
        return Err(file_too_large());
    }
    let hint = match e.runtime.network {
        Network::None => {
            crate::error::offline_hint(e.stderr, "`.network(Network::Bridge)` on the sandbox")
        }
        _ => None,
    };
    Err(Error::NonZeroExit {
        exit_code: e.status.code,
        stderr_tail: tail(e.stderr, TAIL_BYTES),
        stdout_tail: tail(e.stdout, TAIL_BYTES),
        python: python.map(Box::new),
        hint,
    })
}
