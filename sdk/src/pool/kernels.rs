//! Pools of started kernels: the container is up and the default context's
//! kernel is running with its startup done (and the bound modules imported
//! where [`KernelConfig::preload_modules`](crate::kernel::KernelConfig::preload_modules)
//! says so), so `kernel()` is a handover.

use futures::FutureExt;

use super::{PoolConfig, Pooled, Recipe};
use crate::client::Client;
use crate::error::Result;
use crate::kernel::{Kernel, KernelConfig};
use crate::warm::PoolStats;

/// Kernels started ahead of need, all with one configuration.
///
/// ```no_run
/// # async fn demo() -> dockhand::Result<()> {
/// use dockhand::kernel::KernelConfig;
/// use dockhand::pool::PoolConfig;
/// let client = dockhand::Client::connect().await?;
/// let pool = client.kernel_pool(KernelConfig::data_science(), PoolConfig::new(2)).await?;
/// let kernel = pool.kernel().await?; // started, pandas already imported
/// kernel.run("pd.__version__").await?;
/// kernel.close().await?;
/// # Ok(()) }
/// ```
pub struct KernelPool {
    client: Client,
    config: KernelConfig,
    pooled: Pooled<Kernel>,
}

impl std::fmt::Debug for KernelPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelPool")
            .field("stats", &self.pooled.stats())
            .finish()
    }
}

impl Client {
    /// A pool of started kernels with `config`; it fills in the background.
    /// The image is resolved (built if need be) first.
    pub async fn kernel_pool(&self, config: KernelConfig, pool: PoolConfig) -> Result<KernelPool> {
        self.resolve_image(&config.session_config().image).await?;
        // On agent-sandbox, the cluster keeps the kernels' pods started and
        // each kernel claims one as it starts: nothing is held here.
        let pooled = super::open(self, pool, &config.session_config(), |pool| {
            // The pod's start has the pool's start limit (see `session_pool`).
            let limit = pool.start_limit;
            let config = config.clone().session(|s| {
                let within = s.start_timeout.min(limit);
                s.start_timeout(within)
            });
            let client = self.clone();
            Recipe::started(
                "kernel-pool",
                move || client.kernel(config.clone()),
                |k| k.start().boxed(),
                |k| async move { k.close().await }.boxed(),
            )
        })
        .await?;
        Ok(KernelPool {
            client: self.clone(),
            config,
            pooled,
        })
    }
}

impl KernelPool {
    /// A started kernel: a warm one if one is ready, else one started now.
    /// It is the caller's from here (close it when done); the pool makes a
    /// new one in its place.
    pub async fn kernel(&self) -> Result<Kernel> {
        self.pooled
            .take(|claims| async move {
                let kernel = self.client.kernel_from(self.config.clone(), claims);
                kernel.start().await?;
                Ok(kernel)
            })
            .await
    }

    super::pool_methods!("kernel");
}
