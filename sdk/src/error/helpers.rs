//! Building errors, and which of them a retry may cure.

use super::Error;

impl Error {
    /// Wraps an I/O error with what was being done.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            error: source,
        }
    }

    /// An invalid-spec error.
    pub(crate) fn spec(what: &'static str, message: impl Into<String>) -> Self {
        Error::InvalidSpec {
            what,
            message: message.into(),
        }
    }

    /// Whether running the same thing again could succeed (used by retries):
    /// input validation and image build errors are not retried. On a
    /// cluster: an evicted pod, a lost node, an API server that stopped
    /// answering, and its answers that say "later" (429, 500, 502, 503,
    /// 504) are; refusals (403, 404, 409) and images nodes cannot pull are
    /// not.
    pub fn is_retryable(&self) -> bool {
        if let Error::Cluster(cluster) = self {
            return cluster.is_transient();
        }
        matches!(
            self,
            Error::NonZeroExit { .. }
                | Error::Timeout { .. }
                | Error::OutOfMemory { .. }
                | Error::Killed { .. }
                | Error::ContainerGone { .. }
                | Error::EgressGateway { .. }
                | Error::DaemonUnreachable { .. }
                | Error::MissingOutput { .. }
                | Error::BadOutput { .. }
                | Error::OutputNotAssigned { .. }
                | Error::Docker { .. }
        )
    }
}
