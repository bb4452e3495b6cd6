//! The objects a pod needs besides itself (a run's Secret, a session's
//! programs in a ConfigMap, its egress allow-list): made before the pod,
//! owned by this process's lease until the pod exists, then handed to the
//! pod, so the garbage collector removes them with whichever goes first.

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::NamespaceResourceScope;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::api::Call;
use super::pods::PodGuard;
use super::Cluster;
use crate::error::Result;

/// A namespaced kind a pod's companion object can be.
pub(crate) trait CompanionKind:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()>
    + Clone
    + DeserializeOwned
    + Serialize
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    /// The resource's plural, as errors name it.
    const PLURAL: &'static str;
}

impl CompanionKind for Secret {
    const PLURAL: &'static str = "secrets";
}

impl CompanionKind for ConfigMap {
    const PLURAL: &'static str = "configmaps";
}

impl CompanionKind for NetworkPolicy {
    const PLURAL: &'static str = "networkpolicies";
}

/// An object a pod needs, made before it and removed with it.
pub(crate) enum Companion {
    /// Secret values (a run's or a session's).
    Secret(String, Secret),
    /// Programs mounted read-only (a session's agent).
    ConfigMap(String, ConfigMap),
    /// The pod's own egress allow-list (see `cluster::egress`).
    NetworkPolicy(String, NetworkPolicy),
}

/// Deletes a companion in the background when dropped, unless the pod it
/// belongs to took it over.
struct CompanionGuard<'a> {
    cluster: &'a Cluster,
    companion: Option<&'a Companion>,
}

impl Drop for CompanionGuard<'_> {
    fn drop(&mut self) {
        match self.companion.take() {
            Some(Companion::Secret(name, _)) => {
                self.cluster.delete_companion_in_background::<Secret>(name)
            }
            Some(Companion::ConfigMap(name, _)) => self
                .cluster
                .delete_companion_in_background::<ConfigMap>(name),
            Some(Companion::NetworkPolicy(name, _)) => self
                .cluster
                .delete_companion_in_background::<NetworkPolicy>(name),
            None => {}
        }
    }
}

/// A Secret holding `values` (key = secret name), never written anywhere
/// else: not in a pod spec, an event or a log line.
pub(crate) fn secret_of(values: &[(String, String)]) -> Secret {
    Secret {
        string_data: Some(values.iter().cloned().collect()),
        immutable: Some(true),
        ..Default::default()
    }
}

impl Cluster {
    /// Makes `companions`, then `pod`, then hands the companions to the pod.
    /// Whatever step fails or is dropped, nothing made stays behind: the pod
    /// has a guard from before its create request, each companion one from
    /// before its own until the pod owns it.
    pub(crate) async fn launch_pod(
        &self,
        pod: &Pod,
        companions: &[Companion],
    ) -> Result<(PodGuard, String)> {
        let mut guards = Vec::new();
        for companion in companions {
            guards.push(CompanionGuard {
                cluster: self,
                companion: Some(companion),
            });
            match companion {
                Companion::Secret(name, secret) => {
                    self.create_companion(name, secret.clone(), &pod.metadata)
                        .await?
                }
                Companion::ConfigMap(name, map) => {
                    self.create_companion(name, map.clone(), &pod.metadata)
                        .await?
                }
                Companion::NetworkPolicy(name, policy) => {
                    self.create_companion(name, policy.clone(), &pod.metadata)
                        .await?
                }
            }
        }
        let (guard, uid) = self.create_pod(pod).await?;
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        for mut companion in guards {
            match companion.companion {
                Some(Companion::Secret(name, _)) => {
                    self.give_to_pod::<Secret>(name, pod_name, &uid).await?
                }
                Some(Companion::ConfigMap(name, _)) => {
                    self.give_to_pod::<ConfigMap>(name, pod_name, &uid).await?
                }
                Some(Companion::NetworkPolicy(name, _)) => {
                    self.give_to_pod::<NetworkPolicy>(name, pod_name, &uid)
                        .await?
                }
                None => {}
            }
            companion.companion = None;
        }
        Ok((guard, uid))
    }

    /// Makes `object` as `name`, labelled as the pod `like` is and owned
    /// by this process's lease.
    pub(super) async fn create_companion<K: CompanionKind>(
        &self,
        name: &str,
        mut object: K,
        like: &ObjectMeta,
    ) -> Result<()> {
        let meta = object.meta_mut();
        meta.name = Some(name.to_string());
        meta.namespace = None;
        meta.labels = like.labels.clone();
        meta.owner_references = Some(vec![self.owner_reference()]);
        let api: Api<K> = Api::namespaced(self.client.clone(), self.namespace());
        api.create(&PostParams::default(), &object)
            .await
            .map(|_| ())
            .map_err(|e| Call::new("create", K::PLURAL, self.namespace(), name).error(e))
    }

    /// Hands companion `name` to pod `pod` (uid `uid`): deleted by the
    /// garbage collector when the pod is.
    async fn give_to_pod<K: CompanionKind>(&self, name: &str, pod: &str, uid: &str) -> Result<()> {
        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: pod.to_string(),
            uid: uid.to_string(),
            ..Default::default()
        };
        let patch = serde_json::json!({"metadata": {"ownerReferences": [owner]}});
        let api: Api<K> = Api::namespaced(self.client.clone(), self.namespace());
        api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|e| Call::new("patch", K::PLURAL, self.namespace(), name).error(e))
    }

    /// Deletes companion `name` on a task of its own (its pod was never made).
    fn delete_companion_in_background<K: CompanionKind>(&self, name: &str) {
        let api: Api<K> = Api::namespaced(self.client.clone(), self.namespace());
        super::api::delete_in_background(api, name.to_string(), DeleteParams::default());
    }
}
