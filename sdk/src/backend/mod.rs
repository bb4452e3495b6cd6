//! Where a client runs sandboxes: a Docker daemon, or a Kubernetes cluster
//! (feature `kubernetes`). The client holds one `Backend` and asks it for
//! what differs between the two: images, cleanup, what is live, ending.

#[cfg(not(feature = "kubernetes"))]
mod absent;
mod pooled;

#[cfg(feature = "kubernetes")]
pub(crate) use crate::cluster::{AgentPool, ClaimGuard, Cluster, PodGuard};
#[cfg(not(feature = "kubernetes"))]
pub(crate) use absent::{AgentPool, ClaimGuard, Cluster, PodGuard};
pub(crate) use pooled::{Claims, Pooled};

use crate::engine::{labels, Engine};
use crate::error::Result;
use crate::image::{ImageResolver, ImageSpec, ResolvedImage};
use crate::progress::Reporter;

/// A Docker daemon, or a cluster.
// One per client, inside the client's `Arc`: the variants' sizes cost nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Backend {
    Docker {
        engine: Engine,
        images: std::sync::Arc<ImageResolver>,
    },
    // Made by a client on a cluster only (feature `kubernetes`).
    #[cfg_attr(not(feature = "kubernetes"), allow(dead_code))]
    Kubernetes(Cluster),
}

/// What [`Client::reap`](crate::Client::reap) removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReapReport {
    /// Ids of the containers removed (on Kubernetes, names of the pods).
    pub containers: Vec<String>,
    /// Names of the volumes removed (left by containers removed without them).
    pub volumes: Vec<String>,
    /// Names of the egress networks removed.
    pub networks: Vec<String>,
    /// Ids of snapshot images removed: untagged (their snapshot was removed
    /// while a session from it ran) and no longer used.
    pub images: Vec<String>,
}

impl Backend {
    /// On a Docker daemon, with images resolved through it.
    pub(crate) fn docker(engine: Engine, reporter: Reporter) -> Backend {
        let images = std::sync::Arc::new(ImageResolver::new(engine.clone(), reporter));
        Backend::Docker { engine, images }
    }

    /// `"docker"` or `"kubernetes"`.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Backend::Docker { .. } => "docker",
            Backend::Kubernetes(_) => "kubernetes",
        }
    }

    /// The daemon's endpoint, or the API server's URL.
    pub(crate) fn endpoint(&self) -> &str {
        match self {
            Backend::Docker { engine, .. } => engine.endpoint(),
            Backend::Kubernetes(cluster) => cluster.server(),
        }
    }

    /// The Docker engine, if this is Docker.
    pub(crate) fn engine(&self) -> Option<&Engine> {
        match self {
            Backend::Docker { engine, .. } => Some(engine),
            Backend::Kubernetes(_) => None,
        }
    }

    /// The image resolver, if this is Docker.
    pub(crate) fn images(&self) -> Option<&ImageResolver> {
        match self {
            Backend::Docker { images, .. } => Some(images.as_ref()),
            Backend::Kubernetes(_) => None,
        }
    }

    /// The cluster, if this is Kubernetes.
    pub(crate) fn cluster(&self) -> Option<&Cluster> {
        match self {
            Backend::Kubernetes(cluster) => Some(cluster),
            Backend::Docker { .. } => None,
        }
    }

    /// The image `spec` names, made where this backend makes images: built
    /// or pulled on Docker (its progress also to `also`); on a cluster, a
    /// prebuilt reference, or built and pushed (`KubeConfig::push_images`).
    pub(crate) async fn resolve_image(
        &self,
        spec: &ImageSpec,
        also: Option<crate::progress::ProgressHandler>,
    ) -> Result<ResolvedImage> {
        match self {
            Backend::Docker { images, .. } => match also {
                Some(handler) => {
                    let reporter = images.reporter().and(handler);
                    images.resolve_reporting(spec, &reporter).await
                }
                None => images.resolve(spec).await,
            },
            Backend::Kubernetes(cluster) => cluster.resolve_image(spec).await,
        }
    }

    /// Removes what dead dockhand processes left (see `Client::reap`).
    pub(crate) async fn reap(&self) -> Result<ReapReport> {
        let mut report = ReapReport::default();
        match self {
            Backend::Docker { engine, .. } => {
                for (id, labels) in engine.list_managed_containers().await? {
                    if labels::owner_is_gone(&labels) {
                        engine.remove_container(&id, &labels).await?;
                        report.containers.push(id);
                    }
                }
                report.volumes = engine.reap_volumes().await?;
                report.networks = engine.reap_networks().await?;
                report.images = engine.prune_untagged("snapshot").await?;
            }
            Backend::Kubernetes(cluster) => report.containers = cluster.reap().await?,
        }
        Ok(report)
    }

    /// What this process made that still exists (see `Client::live_containers`).
    pub(crate) async fn live(&self) -> Result<Vec<String>> {
        match self {
            Backend::Docker { engine, .. } => Ok(engine
                .list_managed_containers()
                .await?
                .into_iter()
                .filter(|(_, l)| {
                    l.get(labels::SESSION).map(String::as_str) == Some(labels::session_id())
                        && l.get(labels::KIND).map(String::as_str) != Some(labels::WATCHDOG)
                })
                .map(|(id, _)| id)
                .collect()),
            Backend::Kubernetes(cluster) => cluster.live_pods().await,
        }
    }

    /// Ends the connection (see `Client::close`).
    pub(crate) async fn close(&self) -> Result<()> {
        match self {
            Backend::Docker { .. } => Ok(()),
            Backend::Kubernetes(cluster) => cluster.release().await,
        }
    }
}
