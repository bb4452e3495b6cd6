//! Pools of started sessions and started code hosts: `start()` becomes a handover.

use futures::FutureExt;

use super::{PoolConfig, Pooled, Recipe};
use crate::client::Client;
use crate::codemode::{CodeHost, CodeHostConfig};
use crate::error::Result;
use crate::session::{Session, SessionConfig};
use crate::warm::PoolStats;

/// Sessions started ahead of need, all with one configuration.
///
/// ```no_run
/// # async fn demo() -> dockhand::Result<()> {
/// use dockhand::pool::PoolConfig;
/// use dockhand::session::{SessionApi, SessionConfig};
/// let client = dockhand::Client::connect().await?;
/// let pool = client.session_pool(SessionConfig::new(), PoolConfig::new(2)).await?;
/// let session = pool.session().await?; // already started
/// session.exec("echo hi").await?;
/// session.close().await?;
/// # Ok(()) }
/// ```
pub struct SessionPool {
    client: Client,
    config: SessionConfig,
    pooled: Pooled<Session>,
}

impl std::fmt::Debug for SessionPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionPool")
            .field("stats", &self.pooled.stats())
            .finish()
    }
}

/// Code hosts started ahead of need, all with one configuration.
pub struct CodeHostPool {
    client: Client,
    config: CodeHostConfig,
    pooled: Pooled<CodeHost>,
}

impl std::fmt::Debug for CodeHostPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodeHostPool")
            .field("stats", &self.pooled.stats())
            .finish()
    }
}

impl Client {
    /// A pool of started sessions with `config`; it fills in the background.
    /// The image is resolved (built if need be) first.
    pub async fn session_pool(
        &self,
        config: SessionConfig,
        pool: PoolConfig,
    ) -> Result<SessionPool> {
        self.resolve_image(&config.image).await?;
        // On agent-sandbox, the cluster keeps the pods started and each
        // session claims one: nothing is held here.
        let pooled = super::open(self, pool, &config, |pool| {
            // A fill has the pool's start limit: on a cluster, a pod the
            // scheduler cannot place then fails it with the scheduler's reason.
            let limit = config.start_timeout.min(pool.start_limit);
            let (client, config) = (self.clone(), config.clone().start_timeout(limit));
            Recipe::started(
                "session-pool",
                move || client.session(config.clone()),
                |s| s.start().boxed(),
                // Stop, not close: a pooled session nobody used has nothing to snapshot.
                |s| async move { s.stop().await }.boxed(),
            )
        })
        .await?;
        Ok(SessionPool {
            client: self.clone(),
            config,
            pooled,
        })
    }

    /// A pool of started code hosts with `config`; it fills in the background.
    pub async fn code_host_pool(
        &self,
        config: CodeHostConfig,
        pool: PoolConfig,
    ) -> Result<CodeHostPool> {
        // On agent-sandbox, the cluster keeps the hosts' pods started and
        // each host claims one as it starts: nothing is held here.
        let pooled = super::open(self, pool, &config, |_| {
            let (client, config) = (self.clone(), config.clone());
            Recipe::started(
                "code-host-pool",
                move || client.code_host(config.clone()),
                |h| h.start().boxed(),
                |h| async move { h.close().await }.boxed(),
            )
        })
        .await?;
        Ok(CodeHostPool {
            client: self.clone(),
            config,
            pooled,
        })
    }
}

impl SessionPool {
    /// A started session: a warm one if one is ready, else one started now.
    /// It is the caller's from here (close it when done); the pool makes a
    /// new one in its place.
    pub async fn session(&self) -> Result<Session> {
        self.pooled
            .take(|claims| async move {
                let session = self.client.session_from(self.config.clone(), claims);
                session.start().await?;
                Ok(session)
            })
            .await
    }

    super::pool_methods!("session");
}

impl CodeHostPool {
    /// A started code host: a warm one if one is ready, else one started now.
    pub async fn host(&self) -> Result<CodeHost> {
        self.pooled
            .take(|claims| async move {
                let host = self.client.code_host_from(self.config.clone(), claims);
                host.start().await?;
                Ok(host)
            })
            .await
    }

    super::pool_methods!("code host");
}
