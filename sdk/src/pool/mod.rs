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

use crate::backend::PoolTemplate;
pub(crate) use crate::backend::Pooled;
use crate::client::Client;
use crate::error::Result;
use crate::warm::{Discard, Fill, WarmPool};
pub use crate::warm::{PoolConfig, PoolStats};
pub use kernels::KernelPool;
pub use kinds::{CodeHostPool, SessionPool};
pub use sandbox::SandboxPool;

/// How a pool makes and ends its items: `fill` makes one (given the
/// pool's config, for its start limit), `stop` ends one nobody took.
pub(crate) struct Recipe<T: Send + 'static> {
    /// The pool's name in progress events and logs.
    pub name: String,
    pub fill: Fill<T>,
    pub stop: Discard<T>,
}

impl<T: Send + Sync + 'static> Recipe<T> {
    /// Long-lived items (sessions, code hosts, kernels): `make` one, then
    /// `start` it; one nobody took is ended with `end` (a failure is logged).
    pub(crate) fn started(
        name: &str,
        make: impl Fn() -> T + Send + Sync + 'static,
        start: for<'a> fn(&'a T) -> futures::future::BoxFuture<'a, Result<()>>,
        end: fn(T) -> futures::future::BoxFuture<'static, Result<()>>,
    ) -> Self {
        let fill: Fill<T> = std::sync::Arc::new(move || {
            let item = make();
            futures::FutureExt::boxed(async move {
                start(&item).await?;
                Ok(item)
            })
        });
        let pool = name.to_string();
        let stop: Discard<T> = std::sync::Arc::new(move |item| {
            let pool = pool.clone();
            futures::FutureExt::boxed(async move {
                if let Err(e) = end(item).await {
                    tracing::warn!(error = %e, %pool, "ending an item the pool made");
                }
            })
        });
        Recipe {
            name: name.to_string(),
            fill,
            stop,
        }
    }
}

/// Every pool is opened here: on agent-sandbox (a cluster that uses it, a
/// pool of one or more), a warm pool of pods like `template` keeps the
/// items started and this pool holds none; else a [`WarmPool`] of `config`
/// made with `recipe`.
pub(crate) async fn open<T: Send + 'static>(
    client: &Client,
    config: PoolConfig,
    template: &impl PoolTemplate,
    recipe: impl FnOnce(&PoolConfig) -> Recipe<T>,
) -> Result<Pooled<T>> {
    let config = config.normalized();
    let claims = client.runs_on().agent_pool(template, config.size).await?;
    let config = if claims.is_some() {
        PoolConfig::new(0)
    } else {
        config
    };
    let recipe = recipe(&config);
    let warm = WarmPool::new(
        recipe.name,
        config,
        recipe.fill,
        recipe.stop,
        client.reporter().clone(),
    );
    Ok(Pooled { warm, claims })
}
