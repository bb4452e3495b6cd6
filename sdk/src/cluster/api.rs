//! What the API server answered, as dockhand's typed errors.

use crate::error::{ClusterError, Error, ForbiddenBy};

/// One API call, named for the error it may become.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call<'a> {
    pub(crate) verb: &'static str,
    pub(crate) resource: &'static str,
    pub(crate) namespace: &'a str,
    pub(crate) name: &'a str,
}

impl<'a> Call<'a> {
    pub(crate) fn new(
        verb: &'static str,
        resource: &'static str,
        namespace: &'a str,
        name: &'a str,
    ) -> Self {
        Call {
            verb,
            resource,
            namespace,
            name,
        }
    }

    /// `kube::Error` as a typed error: 403, 404, 409 by their meaning, a
    /// failure to connect as `Unreachable`, the rest with their status.
    pub(crate) fn error(&self, error: kube::Error) -> Error {
        match error {
            kube::Error::Api(status) => self.status(status.code, &status.reason, &status.message),
            kube::Error::UpgradeConnection(e) => ClusterError::Api {
                operation: self.verb,
                status: None,
                reason: "UpgradeFailed".into(),
                message: format!("{} {}: {e}", self.resource, self.name),
            }
            .into(),
            kube::Error::HyperError(_) | kube::Error::Service(_) => ClusterError::Unreachable {
                server: "the API server".into(),
                reason: format!("{} {} {}: {error}", self.verb, self.resource, self.name),
                hint: "the cluster stopped answering; check `kubectl cluster-info`".into(),
            }
            .into(),
            other => ClusterError::Api {
                operation: self.verb,
                status: None,
                reason: "ClientError".into(),
                message: format!("{} {}: {other}", self.resource, self.name),
            }
            .into(),
        }
    }

    /// A `Status` the API server sent (in a response, or as a watch's ERROR event).
    pub(crate) fn status(&self, code: u16, reason: &str, message: &str) -> Error {
        let namespace = self.namespace.to_string();
        let message = message.to_string();
        match code {
            403 => ClusterError::Forbidden {
                verb: self.verb,
                resource: self.resource,
                namespace,
                by: ForbiddenBy::of(&message),
                message,
            },
            404 => ClusterError::NotFound {
                resource: self.resource,
                namespace,
                message,
            },
            409 => ClusterError::Conflict {
                resource: self.resource,
                name: self.name.to_string(),
                message,
            },
            _ => ClusterError::Api {
                operation: self.verb,
                status: (code != 0).then_some(code),
                reason: reason.to_string(),
                message,
            },
        }
        .into()
    }
}

/// Whether `error` is the API server's 404 (a delete of something already gone).
pub(crate) fn is_not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 404)
}

/// Whether `error` is the API server's 409 (a create of something that exists).
pub(crate) fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 409)
}

/// Deletes `name` on a task of its own, for a guard that dropped. A 404 is
/// tried again twice (1 s, then 4 s later): the create request of a future
/// dropped mid-flight can reach the server after the first delete, and the
/// object would otherwise live until its owner's lease ends.
pub(crate) fn delete_in_background<K>(
    api: kube::Api<K>,
    name: String,
    params: kube::api::DeleteParams,
) where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(object = %name, "no runtime to delete an object; its owner lease will collect it");
        return;
    };
    runtime.spawn(async move {
        for wait in [0, 1, 4] {
            tokio::time::sleep(std::time::Duration::from_secs(wait)).await;
            match api.delete(&name, &params).await {
                Ok(_) => return,
                Err(e) if is_not_found(&e) => continue,
                Err(e) => {
                    tracing::warn!(object = %name, error = %e, "deleting an object failed; its owner lease will collect it");
                    return;
                }
            }
        }
    });
}
