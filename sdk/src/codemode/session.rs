//! A persistent namespace on a code host: one Monty session the bridge keeps
//! by id, so variables and functions last from one execution to the next.

use serde::Serialize;

use super::{CodeHost, Execution, Toolset};
use crate::error::Result;

/// A persistent namespace on a code host (see [`CodeHost::session`]).
#[derive(Debug, Clone)]
pub struct CodeSession {
    pub(super) host: CodeHost,
    pub(super) id: String,
}

impl CodeSession {
    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Runs `code` in this session's namespace: variables and functions from
    /// earlier executions are still there. After a time, memory or loop limit
    /// (or a crash) the namespace is discarded and the next execution starts afresh.
    pub async fn execute(
        &self,
        code: &str,
        inputs: impl Serialize,
        tools: &Toolset,
    ) -> Result<Execution> {
        self.host.run(code, inputs, tools, Some(&self.id)).await
    }

    /// Ends the session; its namespace, and the File and Dir results its
    /// code held, are gone.
    pub async fn close(self) -> Result<()> {
        self.host.close_session(&self.id).await
    }
}
