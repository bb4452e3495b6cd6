//! The objects besides pods: the deny-all NetworkPolicy, the ConfigMap that
//! carries dockhand's programs, and agent-sandbox's SandboxTemplate and
//! SandboxWarmPool (custom resources, so typed here rather than by k8s-openapi).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, PodSpec};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use serde::Serialize;

/// The API group and version of agent-sandbox's templates and pools
/// (kubernetes-sigs/agent-sandbox, `extensions.agents.x-k8s.io`).
pub const AGENT_SANDBOX_API: &str = "extensions.agents.x-k8s.io/v1beta1";

/// Shuts every door of the pods matching `selector`: no ingress, and no
/// egress either unless `egress` (the sandbox asked for the network).
pub(super) fn network_policy(
    meta: ObjectMeta,
    selector: BTreeMap<String, String>,
    egress: bool,
) -> NetworkPolicy {
    let mut types = vec!["Ingress".to_string()];
    if !egress {
        types.push("Egress".into());
    }
    NetworkPolicy {
        metadata: meta,
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(selector),
                ..Default::default()
            }),
            policy_types: Some(types),
            // No rules of a listed type: nothing of that type is allowed.
            ingress: None,
            egress: None,
        }),
    }
}

/// dockhand's programs (the session agent, the code host's bridge) as a
/// ConfigMap to mount where Docker would have uploaded them.
pub(super) fn programs(meta: ObjectMeta, files: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: meta,
        data: Some(
            files
                .iter()
                .map(|(name, text)| (name.to_string(), text.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

/// agent-sandbox's `SandboxTemplate`: the pod a warm pool keeps ready.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxTemplate {
    /// [`AGENT_SANDBOX_API`].
    pub api_version: String,
    /// `SandboxTemplate`.
    pub kind: String,
    /// Name, namespace, labels.
    pub metadata: ObjectMeta,
    /// The pod and its network rules.
    pub spec: SandboxTemplateSpec,
}

/// What a [`SandboxTemplate`] holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxTemplateSpec {
    /// The pod every sandbox of the template runs.
    pub pod_template: PodTemplate,
    /// The shared network policy the controller applies (empty lists deny all).
    pub network_policy: TemplateNetworkPolicy,
}

/// A pod's labels and spec, as agent-sandbox nests them.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PodTemplate {
    /// Labels put on each pod.
    pub metadata: PodMetadata,
    /// The pod.
    pub spec: PodSpec,
}

/// Labels of a templated pod.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PodMetadata {
    /// Labels.
    pub labels: BTreeMap<String, String>,
}

/// agent-sandbox's restricted network policy: traffic is allowed only by a
/// rule, so empty lists deny everything.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TemplateNetworkPolicy {
    /// Allowed inbound traffic (none).
    pub ingress: Vec<NetworkPolicyIngressRule>,
    /// Allowed outbound traffic: none, or everything when the sandbox asked
    /// for the network.
    pub egress: Vec<NetworkPolicyEgressRule>,
}

impl TemplateNetworkPolicy {
    pub(super) fn new(egress: bool) -> Self {
        TemplateNetworkPolicy {
            ingress: Vec::new(),
            egress: if egress {
                vec![NetworkPolicyEgressRule::default()]
            } else {
                Vec::new()
            },
        }
    }
}

/// agent-sandbox's `SandboxWarmPool`: keeps `replicas` sandboxes of a
/// template started, ready to be claimed.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxWarmPool {
    /// [`AGENT_SANDBOX_API`].
    pub api_version: String,
    /// `SandboxWarmPool`.
    pub kind: String,
    /// Name, namespace, labels.
    pub metadata: ObjectMeta,
    /// Size and template.
    pub spec: SandboxWarmPoolSpec,
}

/// What a [`SandboxWarmPool`] holds.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxWarmPoolSpec {
    /// How many sandboxes to keep ready.
    pub replicas: i32,
    /// The template they are made from.
    pub sandbox_template_ref: TemplateRef,
}

/// A reference to a [`SandboxTemplate`] by name.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TemplateRef {
    /// The template's name.
    pub name: String,
}
