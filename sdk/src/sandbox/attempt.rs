//! What an attempt starts from (the prepared job, the caller's options, a
//! pool's warm container or pod) and what a run gives back: shared by the
//! attempts on Docker (`launch`) and on a cluster (`on_cluster`), and by
//! `run`, which chooses between them.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::capture::{CapturedText, OutputHandler, OutputLine};
use super::inputs;
use super::outputs::Outputs;
use crate::engine::{Attached, ContainerGuard};
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

/// How a run's code and inputs reach its container.
pub(super) enum JobDelivery {
    /// As JSON in a cold container's environment, or on a warm one's
    /// handover line, run by `command` (see [`inputs::inline_job`]).
    Inline { command: Vec<String>, job: String },
    /// As an archive uploaded into `/var/inputs`, run by `command`.
    Upload {
        command: Vec<String>,
        tar: inputs::InputsTar,
    },
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
    /// Images not built by dockhand may lack a writable /var/outputs.
    pub(super) needs_outputs_dir: bool,
    /// The way out through the egress gateway, for a sandbox with a policy.
    pub(super) egress: Option<crate::gateway::Lease>,
}

/// A pool's started container, attached since before its start (so the
/// handover is one write on its stdin), waiting for its one job.
pub(crate) struct WarmContainer {
    /// Owns the container: dropping it removes the container.
    pub(crate) container: ContainerGuard,
    /// Its stdin, stdout and stderr.
    pub(crate) attached: Attached,
    /// Its network and registration with the egress gateway, made with it
    /// (a sandbox with a policy): the run starts with its way out ready.
    pub(crate) egress: Option<crate::gateway::Lease>,
}

/// How long an attempt waits for a pool's item being made: what is left
/// of its `deadline`, at most [`WAIT_LIMIT`](crate::warm::WAIT_LIMIT).
pub(super) fn pool_wait(deadline: Option<(tokio::time::Instant, Duration)>) -> Duration {
    deadline.map_or(crate::warm::WAIT_LIMIT, |(at, _)| {
        at.saturating_duration_since(tokio::time::Instant::now())
            .min(crate::warm::WAIT_LIMIT)
    })
}

/// What a pool holds: a started container on Docker, a pod waiting for
/// its inputs on a cluster.
pub(crate) enum Warm {
    Container(Box<WarmContainer>),
    // Made on a cluster only (feature `kubernetes`).
    #[cfg_attr(not(feature = "kubernetes"), allow(dead_code))]
    Pod(Box<WarmPod>),
}

/// A pool's pod, waiting in its `inputs` container for a run's attempt
/// number and inputs archive (see `manifests::warm_one_shot_pod`).
#[cfg_attr(not(feature = "kubernetes"), allow(dead_code))]
pub(crate) struct WarmPod {
    /// Owns the pod (or the claim that holds it): dropping it deletes the pod.
    pub(super) guard: crate::held::Held,
    pub(super) name: String,
}

impl WarmPod {
    /// Deletes the pod, waiting for the API server to take the delete.
    pub(crate) async fn remove(self) -> Result<()> {
        self.guard.remove().await
    }
}
