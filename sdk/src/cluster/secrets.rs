//! A run's secret values, in a Secret object of its own: never in a pod
//! spec, an event or a log line.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::Api;

use super::api::{is_not_found, Call};
use super::Cluster;
use crate::error::Result;

impl Cluster {
    /// Makes Secret `name` holding `values` (key = secret name), labelled as
    /// the pod `like` is and owned by this process's lease.
    pub(crate) async fn create_secret(
        &self,
        name: &str,
        values: &[(String, String)],
        like: &ObjectMeta,
    ) -> Result<()> {
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                labels: like.labels.clone(),
                owner_references: Some(vec![self.owner_reference()]),
                ..Default::default()
            },
            string_data: Some(values.iter().cloned().collect()),
            immutable: Some(true),
            ..Default::default()
        };
        let api: Api<Secret> = Api::namespaced(self.client.clone(), self.namespace());
        api.create(&PostParams::default(), &secret)
            .await
            .map(|_| ())
            .map_err(|e| Call::new("create", "secrets", self.namespace(), name).error(e))
    }

    /// Hands Secret `name` to pod `pod`: deleted by the garbage collector
    /// when the pod is.
    pub(crate) async fn give_secret_to_pod(&self, name: &str, pod: &str, uid: &str) -> Result<()> {
        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: pod.to_string(),
            uid: uid.to_string(),
            ..Default::default()
        };
        let patch = serde_json::json!({"metadata": {"ownerReferences": [owner]}});
        let api: Api<Secret> = Api::namespaced(self.client.clone(), self.namespace());
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|e| Call::new("patch", "secrets", self.namespace(), name).error(e))
    }

    /// Deletes Secret `name` on a task of its own (its pod was never made).
    pub(crate) fn delete_secret_in_background(&self, name: &str) {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), self.namespace());
        let name = name.to_string();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) => {}
                    Err(e) if is_not_found(&e) => {}
                    Err(e) => tracing::warn!(secret = %name, error = %e, "deleting a run's Secret failed; its owner lease will collect it"),
                }
            });
        }
    }
}
