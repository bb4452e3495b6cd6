//! A one-shot attempt as every backend takes it: what to launch (a
//! [`OneShot`]), what a pool keeps started for it ([`Warm`]), and what the
//! launch gives back ([`Launched`]): the program's output, its end, and
//! where its outputs are read from. The sandbox reads and concludes the
//! same way whichever backend ran it.

use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::Stream;

use super::Held;
use crate::engine::{Attached, ContainerGuard, ContainerSpec, ExitStatus, LogChunk};
use crate::error::{Error, Result};
use crate::settings::{Network, Secret};

/// Directory inside the container where inputs land.
pub const INPUTS_DIR: &str = "/var/inputs";
/// Directory inside the container where outputs are collected from.
pub const OUTPUTS_DIR: &str = "/var/outputs";

/// The environment variable an inline job travels in (the runner removes it
/// before the code runs).
pub const INLINE_JOB_ENV: &str = "DOCKHAND_JOB";

/// A program's stdout and stderr, chunk by chunk.
pub(crate) type OutputStream = Pin<Box<dyn Stream<Item = Result<LogChunk>> + Send>>;

/// The archive of a run's inputs: in memory when small, else in a temporary
/// file (removed with the last clone) that is streamed to the daemon.
#[derive(Clone, Debug)]
pub enum InputsTar {
    /// Small: held in memory.
    Memory(Bytes),
    /// Large: on disk.
    Spooled(std::sync::Arc<tempfile::TempPath>),
}

impl InputsTar {
    /// Extracts the archive into `dir` of container `id`.
    pub async fn upload(&self, engine: &crate::engine::Engine, id: &str, dir: &str) -> Result<()> {
        match self {
            InputsTar::Memory(tar) => engine.upload_archive(id, dir, tar.clone()).await,
            InputsTar::Spooled(path) => engine.upload_archive_file(id, dir, path).await,
        }
    }
}

/// How a run's code and inputs reach its container.
pub(crate) enum JobDelivery {
    /// As JSON in a cold container's environment, or on a warm one's
    /// handover line, run by `command` (only where the backend takes
    /// inline jobs: [`Offers::inline_jobs`](super::Offers::inline_jobs)).
    Inline { command: Vec<String>, job: String },
    /// As an archive uploaded into `/var/inputs`, run by `command`.
    Upload {
        command: Vec<String>,
        tar: InputsTar,
    },
}

impl JobDelivery {
    /// The command the program runs with.
    pub(crate) fn command(&self) -> &[String] {
        let (JobDelivery::Inline { command, .. } | JobDelivery::Upload { command, .. }) = self;
        command
    }
}

/// What a one-shot's containers are, whichever attempt: shared by the
/// launch of an attempt and the fill of a pool.
pub(crate) struct OneShotShape<'a> {
    /// The sandbox's name (its pods are named after it).
    pub(crate) name: &'a str,
    /// Its container, with the image and command a cold one runs.
    pub(crate) spec: ContainerSpec,
    /// Its secrets as declared (how each is mounted).
    pub(crate) secrets: &'a [Secret],
    pub(crate) network: &'a Network,
    /// The run's time limit.
    pub(crate) timeout: Option<Duration>,
    /// Images not built by dockhand may lack a writable /var/outputs.
    pub(crate) needs_outputs_dir: bool,
}

/// One attempt to launch.
pub(crate) struct OneShot<'a> {
    pub(crate) shape: OneShotShape<'a>,
    /// How the code and inputs reach the container.
    pub(crate) job: &'a JobDelivery,
    /// 1-based.
    pub(crate) number: u32,
    /// Secret names and what the container gets: values, or placeholders
    /// for secrets bound to hosts.
    pub(crate) values: &'a [(String, String)],
    /// The secrets mounted as files, as an archive for `/run/secrets`.
    pub(crate) secrets_tar: Option<&'a Bytes>,
    /// The run's way out through the egress gateway, opened for the call.
    pub(crate) egress: Option<&'a crate::gateway::Lease>,
    /// What a cold start of a pooled run opens its own way out with.
    pub(crate) gateway: Option<crate::gateway::Access<'a>>,
    /// The pool to take a started container or pod from, if any.
    pub(crate) pool: Option<&'a super::Pooled<Warm>>,
}

/// One of a pool's items, made ahead of need.
pub(crate) struct WarmOneShot<'a> {
    pub(crate) shape: OneShotShape<'a>,
    /// What a warm container runs until it is handed its job (its stdin
    /// gives it the attempt number, and an inline job if any).
    pub(crate) waiter: Vec<String>,
    /// What the waiter's environment adds.
    pub(crate) waiter_env: Vec<String>,
    /// What opens its way out, under a policy.
    pub(crate) gateway: Option<crate::gateway::Access<'a>>,
    /// How long its making may take.
    pub(crate) limit: Duration,
}

/// What a pool holds: a started container on Docker, a pod waiting for
/// its inputs on a cluster.
pub(crate) enum Warm {
    Container(Box<WarmContainer>),
    // Made on a cluster only (feature `kubernetes`).
    #[cfg_attr(not(feature = "kubernetes"), allow(dead_code))]
    Pod(Box<WarmPod>),
}

impl Warm {
    /// Removes it, waiting for the daemon or API server to take the removal.
    pub(crate) async fn remove(self) -> Result<()> {
        match self {
            Warm::Container(warm) => warm.container.remove().await,
            Warm::Pod(pod) => pod.guard.remove().await,
        }
    }
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

/// A pool's pod, waiting in its `inputs` container for a run's attempt
/// number and inputs archive (see `manifests::warm_one_shot_pod`).
#[cfg_attr(not(feature = "kubernetes"), allow(dead_code))]
pub(crate) struct WarmPod {
    /// Owns the pod (or the claim that holds it): dropping it deletes the pod.
    pub(crate) guard: Held,
    pub(crate) name: String,
}

/// An attempt's program, launched: its output as it comes, its end, and
/// the container or pod, owned until the attempt ends.
pub(crate) struct Launched<'a> {
    /// Owns the container or pod: dropping it removes it.
    pub(crate) held: Held,
    /// The program's stdout and stderr (a pod's log is stdout only).
    pub(crate) output: OutputStream,
    /// How the program ended.
    pub(crate) exit: BoxFuture<'a, Result<ExitStatus>>,
    /// Whether `output` ends with the program; else (Docker's attach stream
    /// may stay open, bollard #251) what is buffered is read after the exit.
    pub(crate) output_ends: bool,
    /// The run's time limit, counted from where the backend starts its clock.
    pub(crate) deadline: Option<(tokio::time::Instant, Duration)>,
    /// The way out the container was made with, kept until the attempt ends.
    pub(crate) egress: Option<crate::gateway::Lease>,
    /// The stdin of a warm container, kept open until the run ends (the
    /// program itself reads an empty one).
    pub(crate) _stdin: Option<Pin<Box<dyn tokio::io::AsyncWrite + Send>>>,
}

/// How long an attempt waits for a pool's item being made: what is left
/// of its `deadline`, at most [`WAIT_LIMIT`](crate::warm::WAIT_LIMIT).
pub(crate) fn pool_wait(deadline: Option<(tokio::time::Instant, Duration)>) -> Duration {
    deadline.map_or(crate::warm::WAIT_LIMIT, |(at, _)| {
        at.saturating_duration_since(tokio::time::Instant::now())
            .min(crate::warm::WAIT_LIMIT)
    })
}

/// Runs `step` within the attempt's deadline, if it has one; past it, the
/// run's [`Error::Timeout`] (nothing was printed yet).
pub(crate) async fn within<T>(
    deadline: Option<(tokio::time::Instant, Duration)>,
    step: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    match deadline {
        None => step.await,
        Some((at, limit)) => tokio::time::timeout_at(at, step).await.unwrap_or_else(|_| {
            Err(Error::Timeout {
                timeout: limit,
                stdout: String::new(),
                stderr: String::new(),
            })
        }),
    }
}
