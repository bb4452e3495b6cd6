//! Warm pools: containers, sessions and code hosts started before they are
//! needed, so that a run or a `start()` is a handover.
//!
//! Every run still gets a fresh container that nothing ran in before: a pool
//! only ever makes new ones and hands each out once. A pool is bounded (it
//! never holds or makes more than its size), labelled like everything else
//! the SDK creates (so owner death and [`Client::reap`](crate::Client::reap)
//! cover it), and removes what it holds on [`shutdown`](SandboxPool::shutdown)
//! or drop. When it has nothing ready (it is still filling, or refills fail
//! because the image is gone or the daemon is down) a run starts cold, as it
//! would without a pool; failures are reported through the client's
//! progress handler and `tracing`, and retried with backoff.
//!
//! ```no_run
//! # async fn demo() -> dockhand::Result<()> {
//! use dockhand::pool::PoolConfig;
//! use dockhand::{Client, Sandbox, Type};
//! let client = Client::connect().await?;
//! let double = Sandbox::code("double", "result = x * 2")
//!     .input("x", Type::Int)
//!     .output("result", Type::Int)
//!     .build()?;
//! let pool = client.pool(&double, PoolConfig::new(4)).await?;
//! let out = pool.run([("x", 21)]).await?;
//! assert_eq!(out.get::<i64>("result")?, 42);
//! pool.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # What a pool fixes in advance
//!
//! Docker fixes a container's image, command, environment, limits, network,
//! mounts and user when it is created. A [`SandboxPool`] belongs to one
//! sandbox, so all of those come from it. The per-run parts (code, inputs,
//! the command line with its `{{input}}` arguments, the attempt number) are
//! handed over when the run starts. A sandbox with secrets is not pooled:
//! secret values are read when each run starts, and an env secret would have
//! to be baked in at creation, so its runs start cold. Sessions and code
//! hosts from a pool are started with the pool's configuration, setup steps
//! and lazy env values included, when the pool fills.

/// `stats`, `wait_ready` and `shutdown`, alike on every pool type (each
/// holds a [`Pooled`] in a `pooled` field).
macro_rules! pool_methods {
    ($what:literal) => {
        /// Ready, starting, handed over, misses, fill failures. On
        /// agent-sandbox: its size, the ready pods last counted by
        /// `wait_ready`, claims bound and missed.
        pub fn stats(&self) -> PoolStats {
            self.pooled.stats()
        }

        /// Waits until the pool is full (or `timeout` passes); `true` if it is.
        pub async fn wait_ready(&self, timeout: std::time::Duration) -> bool {
            self.pooled.wait_ready(timeout).await
        }

        #[doc = concat!("Stops refilling and removes every ", $what, " the pool holds, waiting for those being made. On agent-sandbox: deletes its warm pool and template (the cluster removes their unclaimed pods).")]
        pub async fn shutdown(&self) {
            self.pooled.shutdown().await;
        }
    };
}
use pool_methods;

mod kernels;
mod kinds;
mod sandbox;
mod warm;

pub use kernels::KernelPool;
pub use kinds::{CodeHostPool, SessionPool};
pub use sandbox::SandboxPool;
pub use warm::PoolStats;
pub(crate) use warm::WarmPool;

/// Where a pool's takes come from: its warm items, or on a cluster with
/// agent-sandbox, a claim on its warm pool (then it holds no items).
pub(crate) struct Pooled<T: Send + 'static> {
    pub(crate) warm: WarmPool<T>,
    #[cfg(feature = "kubernetes")]
    pub(crate) claims: Option<std::sync::Arc<crate::cluster::AgentPool>>,
}

/// The agent-sandbox pool a pooled start claims its pod from (never one
/// without the `kubernetes` feature).
#[cfg(feature = "kubernetes")]
pub(crate) type Claims = Option<std::sync::Arc<crate::cluster::AgentPool>>;
#[cfg(not(feature = "kubernetes"))]
pub(crate) type Claims = Option<std::convert::Infallible>;

impl<T: Send + 'static> Pooled<T> {
    /// A started item: on agent-sandbox, one `start` makes claiming its pod;
    /// else a warm one if one is ready or on its way, else one `start`
    /// makes now.
    pub(crate) async fn take<Fut>(&self, start: impl FnOnce(Claims) -> Fut) -> crate::Result<T>
    where
        Fut: std::future::Future<Output = crate::Result<T>>,
    {
        #[cfg(feature = "kubernetes")]
        if let Some(claims) = &self.claims {
            return start(Some(claims.clone())).await;
        }
        if let Some(item) = self.warm.take_or_wait(WAIT_LIMIT).await {
            return Ok(item);
        }
        start(None).await
    }

    pub(crate) fn stats(&self) -> PoolStats {
        #[cfg(feature = "kubernetes")]
        if let Some(claims) = &self.claims {
            return claims.stats();
        }
        self.warm.stats()
    }

    pub(crate) async fn wait_ready(&self, timeout: std::time::Duration) -> bool {
        #[cfg(feature = "kubernetes")]
        if let Some(claims) = &self.claims {
            return claims.wait_ready(timeout).await;
        }
        self.warm.wait_ready(usize::MAX, timeout).await
    }

    pub(crate) async fn shutdown(&self) {
        #[cfg(feature = "kubernetes")]
        if let Some(claims) = &self.claims {
            claims.shutdown().await;
        }
        self.warm.shutdown().await;
    }
}

/// The cluster a pool of `size` goes through agent-sandbox on, if it does
/// (see [`KubeConfig::agent_sandbox`](crate::KubeConfig::agent_sandbox)).
#[cfg(feature = "kubernetes")]
pub(crate) async fn agent_sandbox_cluster(
    client: &crate::Client,
    size: usize,
) -> crate::Result<Option<&crate::cluster::Cluster>> {
    match client.cluster() {
        Some(cluster) if size > 0 && cluster.uses_agent_sandbox().await? => Ok(Some(cluster)),
        _ => Ok(None),
    }
}

/// A pool's config once agent-sandbox holds its items (`claims`): it makes
/// none of its own.
#[cfg(feature = "kubernetes")]
pub(crate) fn held_by(
    claims: &Option<std::sync::Arc<crate::cluster::AgentPool>>,
    config: PoolConfig,
) -> PoolConfig {
    if claims.is_some() {
        PoolConfig::new(0)
    } else {
        config
    }
}

/// How long a take waits for an item being made when none is ready: a
/// cold start would take about as long, and compete with it for the daemon.
pub(crate) const WAIT_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// How big a pool is, and how it follows demand.
///
/// ```
/// use std::time::Duration;
/// use dockhand::pool::PoolConfig;
/// // Four ready, up to sixteen while runs keep finding it empty, back to
/// // four after a minute without; at most eight being made at once.
/// let config = PoolConfig::new(4)
///     .max_size(16)
///     .max_starting(8)
///     .shrink_after(Duration::from_secs(60));
/// assert_eq!(config.size, 4);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct PoolConfig {
    /// Items kept ready (started and waiting) when demand is low.
    pub size: usize,
    /// The most items the pool grows to under sustained demand: each take
    /// that has to start cold (none ready, none on its way in time) adds
    /// one, up to this (default: `size`).
    pub max_size: usize,
    /// The most items made at once, each on its own (default: `size`, at
    /// least 2 and at most 16).
    pub max_starting: usize,
    /// A pool grown past `size` that was not found short for this long
    /// gives the extra items back (default 30 s).
    pub shrink_after: std::time::Duration,
    /// How long making one item may take before that fill counts as failed
    /// (default 60 s). On a cluster this is the pod's scheduling, image pull
    /// and start; a pod the scheduler could not place fails with its reason
    /// ([`ClusterError::Unschedulable`](crate::ClusterError::Unschedulable),
    /// in [`PoolStats::last_failure`]). A session's or kernel's own
    /// `start_timeout` still applies when shorter; a code host's is its own
    /// (its first start may build its image).
    pub start_limit: std::time::Duration,
}

impl PoolConfig {
    /// A pool of `size` items.
    pub fn new(size: usize) -> Self {
        PoolConfig {
            size,
            max_size: size,
            max_starting: size.clamp(2, 16),
            shrink_after: std::time::Duration::from_secs(30),
            start_limit: std::time::Duration::from_secs(60),
        }
    }

    /// How long making one item may take (see [`PoolConfig::start_limit`]).
    pub fn start_limit(mut self, limit: std::time::Duration) -> Self {
        self.start_limit = limit;
        self
    }

    /// Lets the pool grow to `max` items under sustained demand (not below `size`).
    pub fn max_size(mut self, max: usize) -> Self {
        self.max_size = max;
        self
    }

    /// At most `n` items made at once (at least 1).
    pub fn max_starting(mut self, n: usize) -> Self {
        self.max_starting = n;
        self
    }

    /// How long a grown pool must go without being found short before it
    /// shrinks back to `size`.
    pub fn shrink_after(mut self, idle: std::time::Duration) -> Self {
        self.shrink_after = idle;
        self
    }

    /// The config with its bounds made consistent.
    pub(crate) fn normalized(self) -> Self {
        PoolConfig {
            max_size: self.max_size.max(self.size),
            max_starting: self.max_starting.max(1),
            ..self
        }
    }
}
