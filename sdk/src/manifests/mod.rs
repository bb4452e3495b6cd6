//! Kubernetes objects from what the capabilities describe: pods (with the
//! hardening of the container spec the Docker backend creates containers
//! from), Jobs, NetworkPolicies, ConfigMaps and agent-sandbox objects. The
//! capabilities say what their pods hold (see `render`'s shapes); the public
//! face of this module is [`crate::k8s`].

mod objects;
mod pod;
mod render;

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::Job;
pub use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::api::core::v1::{ConfigMap, LocalObjectReference, Pod, PodSpec};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde::Serialize;

pub use objects::{
    PodMetadata, PodTemplate, SandboxTemplate, SandboxTemplateSpec, SandboxWarmPool,
    SandboxWarmPoolSpec, TemplateNetworkPolicy, TemplateRef, AGENT_SANDBOX_API,
};
pub(crate) use pod::dns_name as pod_name;
pub(crate) use render::{
    agent_pool, code_host_pod, one_shot_job, one_shot_pod, session_pod, warm_one_shot_pod,
    OneShotShape, SessionShape,
};

use crate::error::{Error, Result};

/// What a cluster needs that a local daemon did not: the image reference its
/// nodes pull, the namespace, names, the runtime class for gVisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeOptions {
    image: String,
    namespace: String,
    name: Option<String>,
    gvisor_runtime_class: String,
    secrets_object: String,
    scratch_limit: String,
    owner: Option<String>,
    agent_image: String,
    placement: Placement,
    /// Seconds a one-shot's pod may take to be ready before its run's
    /// timeout starts (the backend's `KubeConfig::pod_start_limit`).
    start_allowance: i64,
}

/// Where the cluster places pods and what it pulls them with: the settings
/// a cluster's operators give its workloads (node pools, taints, priority,
/// a default runtime, registry credentials). Every pod dockhand makes gets
/// them.
///
/// ```
/// use dockhand::k8s::Placement;
/// let placement = Placement::new()
///     .node_selector("pool", "sandboxes")
///     .toleration("sandboxes", "NoSchedule")
///     .priority_class("sandbox-low")
///     .image_pull_secret("registry-credentials");
/// # let _ = placement;
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Placement {
    node_selector: BTreeMap<String, String>,
    tolerations: Vec<Toleration>,
    priority_class: Option<String>,
    runtime_class: Option<String>,
    image_pull_secrets: Vec<String>,
}

// Every field compares whole (strings and integers).
impl Eq for Placement {}

impl Placement {
    /// No settings: the cluster's defaults.
    pub fn new() -> Self {
        Placement::default()
    }

    /// Only nodes labelled `key=value` (`nodeSelector`; repeatable).
    pub fn node_selector(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.node_selector.insert(key.into(), value.into());
        self
    }

    /// Tolerates the taint `key` with `effect` (`NoSchedule`,
    /// `PreferNoSchedule` or `NoExecute`), whatever its value (repeatable).
    pub fn toleration(self, key: impl Into<String>, effect: impl Into<String>) -> Self {
        self.toleration_of(Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            effect: Some(effect.into()),
            ..Toleration::default()
        })
    }

    /// Any toleration, as Kubernetes spells it (repeatable).
    pub fn toleration_of(mut self, toleration: Toleration) -> Self {
        self.tolerations.push(toleration);
        self
    }

    /// The PriorityClass of the pods (`priorityClassName`).
    pub fn priority_class(mut self, name: impl Into<String>) -> Self {
        self.priority_class = Some(name.into());
        self
    }

    /// The RuntimeClass of pods that ask for no runtime of their own (those
    /// under gVisor take [`KubeOptions::gvisor_runtime_class`]).
    pub fn runtime_class(mut self, name: impl Into<String>) -> Self {
        self.runtime_class = Some(name.into());
        self
    }

    /// A Secret of registry credentials the nodes pull images with
    /// (`imagePullSecrets`; repeatable).
    pub fn image_pull_secret(mut self, name: impl Into<String>) -> Self {
        self.image_pull_secrets.push(name.into());
        self
    }

    /// Writes the settings into a pod's spec.
    pub(crate) fn apply(&self, spec: &mut PodSpec) {
        if !self.node_selector.is_empty() {
            spec.node_selector = Some(self.node_selector.clone());
        }
        if !self.tolerations.is_empty() {
            spec.tolerations = Some(self.tolerations.clone());
        }
        if self.priority_class.is_some() {
            spec.priority_class_name = self.priority_class.clone();
        }
        if spec.runtime_class_name.is_none() {
            spec.runtime_class_name = self.runtime_class.clone();
        }
        if !self.image_pull_secrets.is_empty() {
            spec.image_pull_secrets = Some(
                self.image_pull_secrets
                    .iter()
                    .map(|name| LocalObjectReference { name: name.clone() })
                    .collect(),
            );
        }
    }
}

impl KubeOptions {
    /// The image reference the nodes pull.
    pub(crate) fn image(&self) -> &str {
        &self.image
    }

    /// Options for pods running `image`, a reference the cluster can pull
    /// (dockhand's local image tags mean nothing to a node: push the image
    /// `Client::resolve_image` made, and name it here).
    pub fn new(image: impl Into<String>) -> Self {
        KubeOptions {
            image: image.into(),
            namespace: "default".into(),
            name: None,
            gvisor_runtime_class: "gvisor".into(),
            secrets_object: "dockhand-secrets".into(),
            scratch_limit: "1Gi".into(),
            owner: None,
            agent_image: crate::image::agent::default_image().to_string(),
            placement: Placement::default(),
            start_allowance: 0,
        }
    }

    /// How long a one-shot's pod may take to be ready before its run's
    /// timeout starts: added to the pod's `activeDeadlineSeconds`.
    pub(crate) fn start_allowance(mut self, limit: std::time::Duration) -> Self {
        self.start_allowance = i64::try_from(limit.as_secs()).unwrap_or(i64::MAX / 4);
        self
    }

    /// Where pods go and what they are pulled with (see [`Placement`]).
    pub fn placement(mut self, placement: Placement) -> Self {
        self.placement = placement;
        self
    }

    /// The namespace of every object (default `default`).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// The objects' base name (default: `dockhand-<kind>-<sandbox name>`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The RuntimeClass that runs gVisor on the cluster (default `gvisor`).
    pub fn gvisor_runtime_class(mut self, class: impl Into<String>) -> Self {
        self.gvisor_runtime_class = class.into();
        self
    }

    /// The Secret object secrets are read from, one key per secret name
    /// (default `dockhand-secrets`). Create it yourself; manifests never hold values.
    pub fn secrets_object(mut self, name: impl Into<String>) -> Self {
        self.secrets_object = name.into();
        self
    }

    /// The size limit of each disk-backed scratch folder (`/var/inputs`,
    /// `/var/outputs`; default `1Gi`).
    pub fn scratch_limit(mut self, quantity: impl Into<String>) -> Self {
        self.scratch_limit = quantity.into();
        self
    }

    /// The image a session's pod takes dockhand's session agent from, in
    /// an init container (default: `dockhand/agent:<tag>` as this SDK makes
    /// it; see [`Client::session_agent_image`](crate::Client::session_agent_image)).
    pub fn agent_image(mut self, reference: impl Into<String>) -> Self {
        self.agent_image = reference.into();
        self
    }

    /// A value for the `dev.dockhand.owner` label, so one owner's objects can
    /// be listed and removed together (`kubectl delete ... -l dev.dockhand.owner=...`).
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }
}

/// One rendered object.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
#[allow(clippy::large_enum_variant)]
pub enum Object {
    /// dockhand's programs, mounted into the pod.
    ConfigMap(ConfigMap),
    /// A one-shot run.
    Job(Job),
    /// A code host or session.
    Pod(Pod),
    /// Deny-all ingress, and egress unless the network was asked for.
    NetworkPolicy(NetworkPolicy),
    /// agent-sandbox: the pod a warm pool keeps ready.
    SandboxTemplate(SandboxTemplate),
    /// agent-sandbox: the warm pool.
    SandboxWarmPool(SandboxWarmPool),
}

/// The objects for one sandbox, code host, session or pool, in the order
/// they are applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifests {
    objects: Vec<Object>,
    name: String,
    labels: BTreeMap<String, String>,
    egress: bool,
}

impl Manifests {
    /// The objects.
    pub fn objects(&self) -> &[Object] {
        &self.objects
    }

    /// The objects' base name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// All objects as one YAML stream (`---` between documents), ready for `kubectl apply -f -`.
    pub fn to_yaml(&self) -> Result<String> {
        let mut out = String::new();
        for object in &self.objects {
            let doc = serde_norway::to_string(object)
                .map_err(|e| Error::spec("kubernetes", format!("rendering YAML: {e}")))?;
            out.push_str("---\n");
            out.push_str(&doc);
        }
        Ok(out)
    }

    /// The pod these manifests run (a Job's pod template, or the Pod).
    pub fn pod_spec(&self) -> Option<&PodSpec> {
        self.objects.iter().find_map(|o| match o {
            Object::Pod(p) => p.spec.as_ref(),
            Object::Job(j) => j.spec.as_ref().and_then(|s| s.template.spec.as_ref()),
            _ => None,
        })
    }

    /// The same pod kept warm by agent-sandbox: a `SandboxTemplate` holding
    /// it (with its network rules) and a `SandboxWarmPool` of `size`, plus the
    /// ConfigMaps it mounts. A claim hands over a started pod; a one-shot's
    /// pod waits in its `inputs` init container until the job's inputs arrive.
    pub fn warm_pool(&self, size: i32) -> Result<Manifests> {
        if size < 1 {
            return Err(Error::spec(
                "kubernetes",
                "a warm pool needs a size of at least 1",
            ));
        }
        let pod = self
            .pod_spec()
            .cloned()
            .ok_or_else(|| Error::spec("kubernetes", "these manifests hold no pod to pool"))?;
        render::warm_pool(self, pod, size)
    }
}
