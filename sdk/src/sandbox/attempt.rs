//! What an attempt starts from (the prepared job, the caller's options)
//! and what a run gives back.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::capture::{CapturedText, OutputHandler, OutputLine};
use super::outputs::Outputs;
use crate::backend::JobDelivery;
use crate::error::Result;
use crate::image::ResolvedImage;

/// Per-call options of [`Client::run_with`](crate::Client::run_with).
#[derive(Clone, Default)]
pub struct RunOptions {
    pub(crate) on_output: Option<OutputHandler>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("on_output", &self.on_output.is_some())
            .finish()
    }
}

impl RunOptions {
    /// Default options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Receives each stdout/stderr line while the run goes (secret values redacted).
    pub fn on_output(mut self, handler: impl Fn(OutputLine) + Send + Sync + 'static) -> Self {
        self.on_output = Some(Arc::new(handler));
        self
    }
}

/// One attempt of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Attempt {
    /// 1-based attempt number.
    pub number: u32,
    /// How long it took.
    pub duration: Duration,
    /// Why it failed; `None` for the attempt that succeeded.
    pub error: Option<String>,
}

/// The result of a successful run.
#[derive(Debug)]
#[non_exhaustive]
pub struct RunOutput {
    /// Typed outputs.
    pub outputs: Outputs,
    /// The program's exit code: 0, or one the sandbox accepts
    /// ([`SandboxBuilder::accept_exit_codes`](crate::SandboxBuilder::accept_exit_codes)).
    pub exit_code: i64,
    /// Captured standard output (secret values redacted).
    pub stdout: CapturedText,
    /// Captured standard error (secret values redacted).
    pub stderr: CapturedText,
    /// Wall time of the whole call (all attempts, or the cache lookup).
    pub duration: Duration,
    /// The image reference the run used.
    pub image: String,
    /// Whether the outputs came from the output cache (no container was started).
    pub cached: bool,
    /// Every attempt, failed ones first (empty for a cache hit).
    pub attempts: Vec<Attempt>,
}

impl RunOutput {
    /// Shorthand for `self.outputs.get(name)`.
    pub fn get<T: super::value::FromValue>(&self, name: &str) -> Result<T> {
        self.outputs.get(name)
    }
}

/// Everything an attempt needs, prepared once per call.
pub(super) struct Prepared {
    pub(super) image: ResolvedImage,
    /// How the code and inputs reach the container.
    pub(super) job: JobDelivery,
    /// Where the runner's outputs frame starts on stdout, if it sends one.
    pub(super) frame_marker: Option<String>,
    /// Secret names and what the container gets: values, or placeholders
    /// for secrets bound to hosts.
    pub(super) secrets: Vec<(String, String)>,
    pub(super) secrets_tar: Option<Bytes>,
    /// Secret names and values, redacted from whatever comes back (an
    /// allowed host could echo a bound secret into the sandbox).
    pub(super) redactions: Vec<(String, String)>,
    /// The way out through the egress gateway, for a sandbox with a policy.
    pub(super) egress: Option<crate::gateway::Lease>,
}
