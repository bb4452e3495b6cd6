//! Where a pool's takes come from on this backend: its warm items, or on a
//! cluster with agent-sandbox, claims on the cluster's warm pool.

use crate::warm::{PoolStats, WarmPool, WAIT_LIMIT};

/// Where a pool's takes come from: its warm items, or on a cluster with
/// agent-sandbox, a claim on its warm pool (then it holds no items).
pub(crate) struct Pooled<T: Send + 'static> {
    pub(crate) warm: WarmPool<T>,
    pub(crate) claims: Claims,
}

/// The agent-sandbox pool a pooled start claims its pod from (never one
/// without the `kubernetes` feature).
pub(crate) type Claims = Option<std::sync::Arc<super::AgentPool>>;

impl<T: Send + 'static> Pooled<T> {
    /// A started item: on agent-sandbox, one `start` makes claiming its pod;
    /// else a warm one if one is ready or on its way, else one `start`
    /// makes now.
    pub(crate) async fn take<Fut>(&self, start: impl FnOnce(Claims) -> Fut) -> crate::Result<T>
    where
        Fut: std::future::Future<Output = crate::Result<T>>,
    {
        if let Some(claims) = &self.claims {
            return start(Some(claims.clone())).await;
        }
        if let Some(item) = self.warm.take_or_wait(WAIT_LIMIT).await {
            return Ok(item);
        }
        start(None).await
    }

    pub(crate) fn stats(&self) -> PoolStats {
        if let Some(claims) = &self.claims {
            return claims.stats();
        }
        self.warm.stats()
    }

    pub(crate) async fn wait_ready(&self, timeout: std::time::Duration) -> bool {
        if let Some(claims) = &self.claims {
            return claims.wait_ready(timeout).await;
        }
        self.warm.wait_ready(usize::MAX, timeout).await
    }

    pub(crate) async fn shutdown(&self) {
        if let Some(claims) = &self.claims {
            claims.shutdown().await;
        }
        self.warm.shutdown().await;
    }
}
