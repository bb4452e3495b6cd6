//! Where a client runs sandboxes: a Docker daemon, or a Kubernetes cluster
//! (feature `kubernetes`). The client holds one `Backend` and asks it for
//! what differs between the two: launching a one-shot's attempt and a
//! pool's items for it, images, cleanup, what is live, ending. Each
//! backend's side of a launch lives in a module of its own
//! (`docker_one_shot`, `cluster_one_shot`; `program`, `cluster_program`
//! for long-lived programs); the capabilities above never ask which
//! backend they run on.

#[cfg(not(feature = "kubernetes"))]
mod absent;
#[cfg(feature = "kubernetes")]
mod cluster_one_shot;
#[cfg(feature = "kubernetes")]
mod cluster_program;
#[cfg(feature = "kubernetes")]
mod cluster_storage;
mod docker_one_shot;
mod held;
mod one_shot;
mod pooled;
mod program;

#[cfg(feature = "kubernetes")]
pub(crate) use self::{
    cluster_one_shot::{agent_pool as one_shot_agent_pool, render_shape},
    cluster_program::{agent_pool_of, InPod, PodRecipe, PoolTemplate},
};
#[cfg(feature = "kubernetes")]
pub(crate) use crate::cluster::{AgentPool, ClaimGuard, Cluster, FilesClaim, PodGuard};
#[cfg(not(feature = "kubernetes"))]
use absent::{self as cluster_one_shot, self as cluster_program, self as cluster_storage};
#[cfg(not(feature = "kubernetes"))]
pub(crate) use absent::{
    AgentPool, ClaimGuard, Cluster, FilesClaim, PodGuard, PodRecipe, PoolTemplate,
};
pub(crate) use held::Held;
pub use one_shot::{InputsTar, INPUTS_DIR, OUTPUTS_DIR};
pub(crate) use one_shot::{JobDelivery, Launched, OneShot, OneShotShape, Warm, WarmOneShot};
pub(crate) use pooled::{Claims, Pooled};
pub(crate) use program::{InContainer, Recipe, Started};

/// An archive as it streams out of a container or pod.
pub(crate) type ByteStream = std::pin::Pin<
    Box<dyn futures::Stream<Item = crate::error::Result<bytes::Bytes>> + Send + 'static>,
>;

use crate::engine::{labels, Engine, VolumeRecord};
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

/// What a backend gives beyond running programs: a capability refuses,
/// before anything is made, what its backend lacks, and takes the ways a
/// backend has (an inline job, a frame, the gateway) where it has them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Offers {
    pub(crate) backend: &'static str,
    /// Paths of this machine's, mounted.
    pub(crate) host_paths: bool,
    /// Pausing, resuming and forking from a checkpoint or a stopped container.
    pub(crate) checkpoints: bool,
    /// Named volumes that outlive their containers.
    pub(crate) volumes: bool,
    /// Committing a container to an image (snapshots).
    pub(crate) image_commit: bool,
    /// A policy's way out through dockhand's egress gateway; on a cluster
    /// an allow-list is each pod's own NetworkPolicy instead.
    pub(crate) gateway: bool,
    /// A one-shot's job inline (in a cold container's environment, on a
    /// warm one's handover line): a pod takes its job as an archive.
    pub(crate) inline_jobs: bool,
    /// A program's stdout and stderr apart, so a runner can frame its
    /// outputs on stdout: a pod's log mixes them.
    pub(crate) separate_streams: bool,
}

impl Offers {
    pub(crate) const DOCKER: Offers = Offers {
        backend: "docker",
        host_paths: true,
        checkpoints: true,
        volumes: true,
        image_commit: true,
        gateway: true,
        inline_jobs: true,
        separate_streams: true,
    };
    pub(crate) const CLUSTER: Offers = Offers {
        backend: "kubernetes",
        host_paths: false,
        // Files only: a pause keeps the workspace on the session's claim
        // and deletes the pod (memory is refused when asked).
        checkpoints: true,
        // PersistentVolumeClaims.
        volumes: true,
        image_commit: false,
        gateway: false,
        inline_jobs: false,
        separate_streams: false,
    };

    /// The refusal of `feature` here, with what to do instead.
    pub(crate) fn unsupported(&self, feature: &str, hint: &str) -> crate::Error {
        crate::Error::Unsupported {
            backend: self.backend,
            feature: feature.into(),
            hint: hint.into(),
        }
    }
}

/// What a session keeps its files on, on a backend that stores them apart
/// from its container (a cluster's claim; see `Backend::files_claim`).
#[cfg_attr(not(feature = "kubernetes"), allow(dead_code))]
pub(crate) struct FilesOf<'a> {
    /// The session's name, in the claim's.
    pub(crate) session_name: &'a str,
    /// The image its pods run (recorded for the process that resumes it).
    pub(crate) image: &'a str,
    /// Where the files are mounted: the workspace.
    pub(crate) workspace: &'a str,
    /// Outlives this process (a kept session's, a snapshot's).
    pub(crate) kept: bool,
    /// A claim to copy, for a fork or a snapshot.
    pub(crate) from: Option<&'a str>,
    /// Who reads the files to copy them (`uid`, `gid`).
    pub(crate) user: Option<(i64, i64)>,
    /// The claim's kind label (default: a session's files).
    pub(crate) kind: Option<&'a str>,
}

/// The kind label of snapshots' claims (a cluster's).
pub(crate) const SNAPSHOT_KIND: &str = "session-snapshot";

/// A kept session's files on a cluster, as another process finds them.
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "kubernetes"), allow(dead_code))]
pub(crate) struct KeptFiles {
    /// The claim's name: the kept session's id.
    pub(crate) name: String,
    /// The image its pods ran.
    pub(crate) image: String,
    /// Where its files are mounted.
    pub(crate) workspace: String,
    pub(crate) session_name: Option<String>,
    pub(crate) created: Option<String>,
    /// A pod runs on them now (as `kept_files_list` found them).
    pub(crate) running: bool,
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

    /// The code host image for `spec`: made here on Docker (the bridge is
    /// compiled once per machine); on a cluster, the one its nodes pull.
    pub(crate) async fn resolve_code_host_image(&self, spec: &ImageSpec) -> Result<ResolvedImage> {
        match self {
            Backend::Docker { engine, images } => {
                let spec = crate::image::bridge::code_host_image(engine, images, spec).await?;
                images.resolve(&spec).await
            }
            Backend::Kubernetes(cluster) => cluster.code_host_image(spec).await,
        }
    }

    /// Starts a long-lived program as `recipe` says, attaches to it and
    /// runs `handshake` with it, all within `limit`; past it, `too_slow`
    /// with what the start may be waiting for (on a cluster, the
    /// scheduler's reason comes first). The container or pod is owned from
    /// before its create request: an error, the limit or a dropped future
    /// removes it.
    pub(crate) async fn start_program<R, T, Fut>(
        &self,
        recipe: &R,
        limit: std::time::Duration,
        handshake: impl FnOnce(Started) -> Fut + Send,
        too_slow: impl FnOnce(&str) -> crate::Error,
    ) -> Result<T>
    where
        R: Recipe,
        Fut: std::future::Future<Output = Result<T>> + Send,
    {
        match self {
            Backend::Docker { engine, .. } => {
                program::on_docker(engine, recipe, limit, handshake, too_slow).await
            }
            Backend::Kubernetes(cluster) => {
                cluster_program::start(cluster, recipe, limit, handshake, too_slow).await
            }
        }
    }

    /// Waits until the program in `id` (a container; on a cluster, its pod's
    /// container `container`) has ended, or is gone.
    pub(crate) async fn wait_ended(&self, id: &str, container: &str) {
        match self {
            Backend::Docker { engine, .. } => {
                let _ = engine.wait_container(id).await;
            }
            Backend::Kubernetes(cluster) => {
                cluster_program::wait_ended(cluster, id, container).await
            }
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

    /// What this backend gives beyond running programs.
    pub(crate) fn offers(&self) -> Offers {
        match self {
            Backend::Docker { .. } => Offers::DOCKER,
            Backend::Kubernetes(_) => Offers::CLUSTER,
        }
    }

    /// Refuses, before anything is made, a network or secrets this backend
    /// cannot give (a cluster has no gateway to bind secrets to hosts).
    pub(crate) fn refuse_network(
        &self,
        network: &crate::settings::Network,
        secrets: &[crate::settings::Secret],
    ) -> Result<()> {
        match self {
            Backend::Docker { .. } => Ok(()),
            Backend::Kubernetes(_) => cluster_one_shot::refuse_network(network, secrets),
        }
    }

    /// Launches a one-shot's attempt: a pool's item handed the job, or a
    /// container or pod made for it, its output attached.
    pub(crate) async fn launch_one_shot(&self, plan: &OneShot<'_>) -> Result<Launched<'_>> {
        match self {
            Backend::Docker { engine, .. } => docker_one_shot::launch(engine, plan).await,
            // Boxed: inline, the cluster's launch would make every run's
            // future (the Docker one's too) as large as it is.
            Backend::Kubernetes(cluster) => Box::pin(cluster_one_shot::launch(cluster, plan)).await,
        }
    }

    /// The outputs archive of a launched attempt whose program ended;
    /// `None` if it left no `/var/outputs`.
    pub(crate) async fn one_shot_outputs(&self, held: &Held) -> Result<Option<ByteStream>> {
        match self {
            Backend::Docker { engine, .. } => docker_one_shot::outputs(engine, held.id()).await,
            Backend::Kubernetes(cluster) => cluster_one_shot::outputs(cluster, held.id()).await,
        }
    }

    /// Makes one of a one-shot pool's items: a started container waiting
    /// on its stdin, or a pod waiting for its inputs.
    pub(crate) async fn warm_one_shot(&self, plan: &WarmOneShot<'_>) -> Result<Warm> {
        match self {
            Backend::Docker { engine, .. } => docker_one_shot::warm(engine, plan).await,
            Backend::Kubernetes(cluster) => cluster_one_shot::warm(cluster, plan).await,
        }
    }

    /// Where a pool of `size` items like `template` takes from: on a
    /// cluster that uses agent-sandbox, claims on a warm pool of pods it
    /// opens now; else (`None`) the pool's own items.
    pub(crate) async fn agent_pool<T: PoolTemplate>(
        &self,
        template: &T,
        size: usize,
    ) -> Result<Claims> {
        match self {
            Backend::Docker { .. } => Ok(None),
            Backend::Kubernetes(cluster) => {
                cluster_program::agent_pool(cluster, template, size).await
            }
        }
    }

    /// Makes the named volume `name` (its backend name) with `labels`.
    pub(crate) async fn create_volume(
        &self,
        name: &str,
        labels: std::collections::HashMap<String, String>,
    ) -> Result<VolumeRecord> {
        match self {
            Backend::Docker { engine, .. } => engine.create_volume(name, labels).await,
            Backend::Kubernetes(cluster) => {
                cluster_storage::create_volume(cluster, name, labels).await
            }
        }
    }

    /// The named volume `name`, if it exists.
    pub(crate) async fn volume(&self, name: &str) -> Result<Option<VolumeRecord>> {
        match self {
            Backend::Docker { engine, .. } => engine.volume(name).await,
            Backend::Kubernetes(cluster) => cluster_storage::volume(cluster, name).await,
        }
    }

    /// Every named volume made through dockhand.
    pub(crate) async fn volumes(&self) -> Result<Vec<VolumeRecord>> {
        match self {
            Backend::Docker { engine, .. } => engine.volumes_labelled(labels::VOLUME).await,
            Backend::Kubernetes(cluster) => cluster_storage::volumes(cluster).await,
        }
    }

    /// Removes the named volume `name`: `false` while something mounts it.
    pub(crate) async fn remove_volume(&self, name: &str) -> Result<bool> {
        match self {
            Backend::Docker { engine, .. } => engine.remove_volume(name).await,
            Backend::Kubernetes(cluster) => cluster_storage::remove_volume(cluster, name).await,
        }
    }

    /// Refuses a second writer of a volume that takes one (a cluster's
    /// `ReadWriteOnce` claim); Docker's volumes take any number. `writes`:
    /// each volume to be written, by its name and its backend name.
    pub(crate) async fn check_volume_writers(&self, writes: &[(&str, String)]) -> Result<()> {
        match self {
            Backend::Docker { .. } => Ok(()),
            Backend::Kubernetes(cluster) => {
                Box::pin(cluster_storage::check_writers(cluster, writes)).await
            }
        }
    }

    /// A claim for a session's files, where they live apart from its pod
    /// (a cluster: a pod cannot stop and start again); `None` on Docker,
    /// whose stopped container keeps them.
    pub(crate) async fn files_claim(&self, about: &FilesOf<'_>) -> Result<Option<FilesClaim>> {
        match self {
            Backend::Docker { .. } => Ok(None),
            Backend::Kubernetes(cluster) => Box::pin(cluster_storage::files_claim(cluster, about))
                .await
                .map(Some),
        }
    }

    /// The kept session `id`'s files taken for this process, where they
    /// live apart from a container (a cluster): refused while another
    /// living process holds them; `None` on Docker or if there are none.
    pub(crate) async fn hold_kept_files(
        &self,
        id: &str,
    ) -> Result<Option<(KeptFiles, FilesClaim)>> {
        match self {
            Backend::Docker { .. } => Ok(None),
            Backend::Kubernetes(cluster) => cluster_storage::hold_kept(cluster, id).await,
        }
    }

    /// Every kept session's files (a cluster's claims; none on Docker).
    pub(crate) async fn kept_files_list(&self) -> Result<Vec<KeptFiles>> {
        match self {
            Backend::Docker { .. } => Ok(Vec::new()),
            Backend::Kubernetes(cluster) => cluster_storage::kept_list(cluster).await,
        }
    }

    /// Whether something runs on the kept files `id` now.
    pub(crate) async fn kept_files_in_use(&self, id: &str) -> Result<bool> {
        match self {
            Backend::Docker { .. } => Ok(false),
            Backend::Kubernetes(cluster) => cluster_storage::in_use(cluster, id).await,
        }
    }

    /// Removes the kept session `id`'s files and whatever runs on them
    /// (a cluster's claim and its pods); one gone already is fine.
    pub(crate) async fn remove_kept_files(&self, id: &str) -> Result<()> {
        match self {
            Backend::Docker { .. } => Ok(()),
            Backend::Kubernetes(cluster) => cluster_storage::remove_kept(cluster, id).await,
        }
    }

    /// Every snapshot's files (a cluster's claims; none on Docker, whose
    /// snapshots are images).
    pub(crate) async fn snapshot_files_list(&self) -> Result<Vec<KeptFiles>> {
        match self {
            Backend::Docker { .. } => Ok(Vec::new()),
            Backend::Kubernetes(cluster) => cluster_storage::snapshot_list(cluster).await,
        }
    }

    /// Removes a snapshot's files (a cluster's claim).
    pub(crate) async fn remove_snapshot_files(&self, name: &str) -> Result<()> {
        match self {
            Backend::Docker { .. } => Ok(()),
            Backend::Kubernetes(cluster) => cluster_storage::remove_snapshot(cluster, name).await,
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
