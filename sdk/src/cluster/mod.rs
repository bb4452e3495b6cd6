//! The Kubernetes backend (feature `kubernetes`): the same [`Client`](crate::Client)
//! on a cluster, through kube-rs.
//!
//! A one-shot run is a Pod of three containers (see
//! [`k8s::one_shot`](crate::manifests::one_shot)): its inputs archive goes to the
//! `inputs` init container over an attach stream, the kubelet's record of
//! how `program` ended is the exit truth, and `/var/outputs` comes back as a
//! tar over the `outputs` container's attach stream. No shared filesystem,
//! no exec into the program's own container.
//!
//! A session is a Pod whose agent (from a ConfigMap) speaks its protocol
//! over the `agent` container's attach stream, as it does over a Docker
//! attach; a code host is a Pod whose bridge does the same. Their pools
//! keep such pods started.
//!
//! Every object carries dockhand's labels and an owner reference to this
//! process's `Lease`, renewed every few seconds: when the process dies, any
//! other dockhand client in the namespace (or [`Client::reap`](crate::Client::reap))
//! deletes the lapsed lease, and the cluster's garbage collector removes the
//! pods it owned.

mod api;
mod claims;
mod config;
mod egress;
mod images;
pub(crate) use images::Builder;
mod owned;
mod owner;
mod plan;
mod pod_watch;
mod pods;
mod storage;
#[cfg(test)]
mod tests;
mod watch;

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;

pub(crate) use claims::{AgentPool, ClaimGuard};
pub use config::KubeConfig;
pub(crate) use egress::AllowList;
pub(crate) use plan::PodPlan;
pub(crate) use pods::{PodGuard, PodView};
pub use storage::Storage;
pub(crate) use storage::{is_claim_name, kind_selector, ClaimRecord, FilesClaim, NewClaim};

use crate::error::{ClusterError, Result};

/// The label of pods the namespace's offline NetworkPolicy selects.
pub(crate) const NETWORK_LABEL: &str = "dev.dockhand.network";

/// How long connecting may take by default, the API server's first answer included.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a one-shot's pod may take to be ready, by default (an image
/// pull of a large image included).
const POD_START_LIMIT: Duration = Duration::from_secs(300);

/// A connection to a cluster, with this process's owner lease.
pub(crate) struct Cluster {
    client: kube::Client,
    namespace: String,
    server: String,
    gvisor_runtime_class: String,
    owner: owner::Owner,
    images: images::ClusterImages,
    /// What `KubeConfig::agent_sandbox` asked.
    agent_sandbox: Option<bool>,
    /// The image sessions' pods take the agent from, if the config named one.
    agent_image: Option<String>,
    /// Whether the API server serves agent-sandbox's extensions, once asked.
    agent_sandbox_served: tokio::sync::OnceCell<bool>,
    /// Where pods go (see `KubeConfig::placement`).
    placement: crate::manifests::Placement,
    /// See `KubeConfig::pod_start_limit`.
    pod_start_limit: Duration,
    /// One watch over this process's pods, shared by every wait.
    pod_watch: pod_watch::PodWatch,
    /// What claims are made with (see `KubeConfig::storage`).
    storage: Storage,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("server", &self.server)
            .field("namespace", &self.namespace)
            .finish()
    }
}

impl Cluster {
    /// Connects, asks the API server its version (within the connect
    /// timeout) and takes this process's owner lease.
    pub(crate) async fn connect(config: &KubeConfig) -> Result<Cluster> {
        let limit = config.connect_timeout.unwrap_or(CONNECT_TIMEOUT);
        let (kube_config, server) = config.load().await?;
        let namespace = config
            .namespace
            .clone()
            .unwrap_or_else(|| kube_config.default_namespace.clone());
        let unreachable = |reason: String| ClusterError::Unreachable {
            server: server.clone(),
            reason,
            hint: "check the kubeconfig's current context (`kubectl cluster-info` should answer)"
                .into(),
        };
        let client = kube::Client::try_from(kube_config).map_err(|e| unreachable(e.to_string()))?;
        match tokio::time::timeout(limit, client.apiserver_version()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(unreachable(e.to_string()).into()),
            Err(_) => return Err(unreachable(format!("no answer within {limit:?}")).into()),
        }
        let owner = owner::Owner::start(client.clone(), &namespace, config.lease_duration).await?;
        ensure_offline_policy(&client, &namespace).await?;
        let pod_watch =
            pod_watch::PodWatch::new(Api::namespaced(client.clone(), &namespace), owner.id());
        Ok(Cluster {
            pod_watch,
            client,
            namespace,
            server,
            gvisor_runtime_class: config
                .gvisor_runtime_class
                .clone()
                .unwrap_or_else(|| "gvisor".into()),
            owner,
            images: images::ClusterImages::new(config.builder.clone()),
            agent_sandbox: config.agent_sandbox,
            agent_image: config.agent_image.clone(),
            agent_sandbox_served: tokio::sync::OnceCell::new(),
            placement: config.placement.clone(),
            pod_start_limit: config.pod_start_limit.unwrap_or(POD_START_LIMIT),
            storage: config.storage.clone(),
        })
    }

    /// The image the nodes pull for `spec`: a prebuilt reference as it is,
    /// or the spec built and pushed as [`KubeConfig::push_images`] says.
    pub(crate) async fn resolve_image(
        &self,
        spec: &crate::image::ImageSpec,
    ) -> Result<crate::image::ResolvedImage> {
        self.images.resolve(spec).await
    }

    /// The image sessions' pods take the session agent from (see
    /// [`KubeConfig::agent_image`]).
    pub(crate) async fn agent_image(&self) -> Result<String> {
        match &self.agent_image {
            Some(reference) => Ok(reference.clone()),
            None => self.images.agent().await,
        }
    }

    /// The code host image the nodes pull for `spec` (the bridge added to
    /// a spec before it is pushed).
    pub(crate) async fn code_host_image(
        &self,
        spec: &crate::image::ImageSpec,
    ) -> Result<crate::image::ResolvedImage> {
        self.images.code_host(spec).await
    }

    /// How long a one-shot's pod may take to be ready for its inputs.
    pub(crate) fn pod_start_limit(&self) -> Duration {
        self.pod_start_limit
    }

    /// The API server's URL.
    pub(crate) fn server(&self) -> &str {
        &self.server
    }

    /// The namespace everything is made in.
    pub(crate) fn namespace(&self) -> &str {
        &self.namespace
    }

    pub(crate) fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Render options for this cluster: its namespace, this process as the
    /// owner, the RuntimeClass for gVisor.
    pub(crate) fn render_options(&self, image: &str, name: &str) -> crate::manifests::KubeOptions {
        crate::manifests::KubeOptions::new(image)
            .namespace(self.namespace.clone())
            .name(name)
            .owner(self.owner.id())
            .gvisor_runtime_class(self.gvisor_runtime_class.clone())
            .placement(self.placement.clone())
            .start_allowance(self.pod_start_limit)
    }

    /// The reference every object this process makes carries, so the
    /// garbage collector removes it with the lease.
    pub(crate) fn owner_reference(
        &self,
    ) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        self.owner.reference()
    }

    /// Deletes the objects of owners whose lease has lapsed (dead processes),
    /// and the lapsed leases. Returns the removed pods' names.
    pub(crate) async fn reap(&self) -> Result<Vec<String>> {
        owner::reap(
            &self.client,
            &self.namespace,
            self.owner.id(),
            self.owner.lease_name(),
        )
        .await
    }

    /// Deletes this connection's owner lease now (see `Client::close`).
    pub(crate) async fn release(&self) -> Result<()> {
        self.owner.release().await
    }

    /// Names of the pods this process made that still exist.
    pub(crate) async fn live_pods(&self) -> Result<Vec<String>> {
        owner::pods_of(&self.client, &self.namespace, self.owner.id()).await
    }
}

/// The namespace's NetworkPolicy for pods without a network: no ingress, no
/// egress, for every pod labelled `dev.dockhand.network=none`. Shared by
/// every dockhand process in the namespace, so a run costs no policy of its
/// own; made once, kept.
async fn ensure_offline_policy(client: &kube::Client, namespace: &str) -> Result<()> {
    use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicySpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
    let name = "dockhand-offline";
    let policy = NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                [(
                    crate::engine::labels::MANAGED.to_string(),
                    "true".to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some([(NETWORK_LABEL.to_string(), "none".to_string())].into()),
                ..Default::default()
            }),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ..Default::default()
        }),
    };
    let api: Api<NetworkPolicy> = Api::namespaced(client.clone(), namespace);
    match api.create(&kube::api::PostParams::default(), &policy).await {
        Ok(_) => Ok(()),
        Err(e) if api::is_conflict(&e) => Ok(()),
        Err(e) => Err(api::Call::new("create", "networkpolicies", namespace, name).error(e)),
    }
}

/// What the Kubernetes backend cannot do yet, refused before anything is
/// made, with what to do instead.
pub(crate) fn unsupported(feature: impl Into<String>, hint: impl Into<String>) -> crate::Error {
    crate::Error::Unsupported {
        backend: "kubernetes",
        feature: feature.into(),
        hint: hint.into(),
    }
}

/// Refuses, before anything is made, the networks a pod cannot have, and
/// secrets bound to hosts (they need the egress gateway).
pub(crate) fn refuse_network(
    network: &crate::settings::Network,
    secrets: &[crate::Secret],
) -> Result<()> {
    use crate::settings::Network;
    if secrets.iter().any(|s| s.hosts().is_some()) {
        return Err(unsupported(
            "secrets bound to hosts",
            "bound secrets need dockhand's egress gateway, which runs on Docker only; pass the secret unbound, or run on Docker",
        ));
    }
    match network {
        Network::None | Network::Bridge => Ok(()),
        Network::Named(_) => Err(unsupported(
            "a named Docker network",
            "use `.network(true)` (the cluster's pod network) or none",
        )),
        Network::Egress(policy) => egress::expressible(policy),
    }
}

/// The allow-list a pod on `network` gets (see `egress`), resolved now;
/// `None` when the network is not an allow-list.
pub(crate) async fn allow_list(network: &crate::settings::Network) -> Result<Option<AllowList>> {
    match network {
        crate::settings::Network::Egress(policy) => Ok(Some(egress::allow_list(policy).await?)),
        _ => Ok(None),
    }
}
