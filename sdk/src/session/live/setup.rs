//! Setup hooks: async steps a session's config names, run once after its
//! container starts, given the session itself.

use std::sync::Arc;

use futures::future::BoxFuture;

use super::Session;
use crate::error::Result;
use crate::session::config::{SessionConfig, SetupStep};

/// A step run once after the session's container starts.
pub type SetupHook = Arc<dyn Fn(Session) -> BoxFuture<'static, Result<()>> + Send + Sync>;

impl SessionConfig {
    /// An async step run once after start, given the session.
    ///
    /// ```
    /// use dockhand::session::{SessionApi, SessionConfig};
    /// use futures::FutureExt;
    /// let config = SessionConfig::new().setup(|session| {
    ///     async move {
    ///         session.write_file("ready.txt", b"yes").await?;
    ///         Ok(())
    ///     }
    ///     .boxed()
    /// });
    /// # let _ = config;
    /// ```
    pub fn setup<F>(mut self, hook: F) -> Self
    where
        F: Fn(Session) -> BoxFuture<'static, Result<()>> + Send + Sync + 'static,
    {
        let hook: SetupHook = Arc::new(hook);
        self.setup.push(SetupStep::Hook(Arc::new(hook)));
        self
    }
}
