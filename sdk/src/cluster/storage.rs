//! Storage on a cluster: PersistentVolumeClaims for named volumes and for
//! what a pausable session keeps (its workspace). Made labelled, found by
//! label, copied (a CSI clone where the storage class makes them, else a
//! pod of the backend's own that copies one claim into the other), and
//! removed only when no pod uses them.
//!
//! A volume's claim and a kept session's claim belong to no process (they
//! outlive it, as Docker's named volumes and kept containers do); a
//! pausable session's claim is owned by this process's lease, so the
//! garbage collector takes it if the process dies.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Container, PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource,
    Pod, PodSecurityContext, PodSpec, ResourceRequirements, SecurityContext,
    TypedLocalObjectReference, Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Api;

use super::api::{is_not_found, Call};
use super::Cluster;
use crate::engine::labels;
use crate::error::{ClusterError, Error, Result};

/// What volumes and sessions' kept files are stored on (see
/// [`KubeConfig::storage`](crate::KubeConfig::storage)).
///
/// ```
/// use dockhand::k8s::Storage;
/// let storage = Storage::new().class("fast").session_size("5Gi");
/// # let _ = storage;
/// ```
#[derive(Debug, Clone)]
pub struct Storage {
    pub(crate) class: Option<String>,
    pub(crate) volume_size: String,
    pub(crate) session_size: String,
    pub(crate) shared_writers: bool,
    pub(crate) clones: bool,
}

impl Default for Storage {
    fn default() -> Self {
        Storage {
            class: None,
            volume_size: "1Gi".into(),
            session_size: "1Gi".into(),
            shared_writers: false,
            clones: false,
        }
    }
}

impl Storage {
    /// The cluster's default storage class, 1 GiB claims, one writer at a
    /// time, copies made by a pod.
    pub fn new() -> Self {
        Storage::default()
    }

    /// The StorageClass claims are made in.
    pub fn class(mut self, class: impl Into<String>) -> Self {
        self.class = Some(class.into());
        self
    }

    /// The size a volume's claim asks for (a Kubernetes quantity, `10Gi`).
    pub fn volume_size(mut self, size: impl Into<String>) -> Self {
        self.volume_size = size.into();
        self
    }

    /// The size a pausable or kept session's claim asks for.
    pub fn session_size(mut self, size: impl Into<String>) -> Self {
        self.session_size = size.into();
        self
    }

    /// Whether the class lets pods on several nodes write one claim
    /// (`ReadWriteMany`: NFS, CephFS, ...). Without it (the default),
    /// volumes are `ReadWriteOnce` and a second session mounting one
    /// read-write is refused while the first runs.
    pub fn shared_writers(mut self, many: bool) -> Self {
        self.shared_writers = many;
        self
    }

    /// Whether the class's CSI driver clones claims (a claim whose
    /// `dataSource` is another): snapshots and forks then ask the driver
    /// for a copy instead of running a pod that copies the files.
    pub fn clones(mut self, clones: bool) -> Self {
        self.clones = clones;
        self
    }
}

/// A claim as dockhand reads it back.
#[derive(Debug, Clone)]
pub(crate) struct ClaimRecord {
    pub(crate) name: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) annotations: BTreeMap<String, String>,
    pub(crate) created: Option<String>,
}

impl From<PersistentVolumeClaim> for ClaimRecord {
    fn from(claim: PersistentVolumeClaim) -> Self {
        let meta = claim.metadata;
        ClaimRecord {
            name: meta.name.unwrap_or_default(),
            labels: meta.labels.unwrap_or_default(),
            annotations: meta.annotations.unwrap_or_default(),
            created: meta.creation_timestamp.map(|t| t.0.to_string()),
        }
    }
}

/// What a new claim is.
pub(crate) struct NewClaim<'a> {
    pub(crate) name: &'a str,
    /// Its `dev.dockhand.kind`.
    pub(crate) kind: &'a str,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) annotations: BTreeMap<String, String>,
    /// Owned by this process's lease (gone with it), or by nothing.
    pub(crate) owned: bool,
    /// A volume's size and access, or a session's.
    pub(crate) volume: bool,
    /// Cloned from this claim by the CSI driver (`Storage::clones`).
    pub(crate) clone_of: Option<&'a str>,
}

/// Copies the claim at `/from` into the one at `/to`.
const COPY_SCRIPT: &str = r#"cd /from && for f in * .[!.]* ..?*; do if [ -e "$f" ] || [ -L "$f" ]; then cp -a "$f" /to/ || exit 1; fi; done"#;

/// How long a copy of one claim into another may take.
const COPY_LIMIT: Duration = Duration::from_secs(600);

/// Whether `name` can be a claim's name: a DNS-1123 subdomain.
pub(crate) fn is_claim_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

impl Cluster {
    fn claims(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), self.namespace())
    }

    /// The storage settings claims are made with.
    pub(crate) fn storage(&self) -> &Storage {
        &self.storage
    }

    /// Makes the claim `new` describes; one of that name already there is
    /// [`ClusterError::Conflict`].
    pub(crate) async fn create_claim(&self, new: NewClaim<'_>) -> Result<ClaimRecord> {
        let storage = &self.storage;
        let mut labels = new.labels;
        labels.insert(labels::MANAGED.into(), "true".into());
        labels.insert(labels::KIND.into(), new.kind.into());
        let many = new.volume && storage.shared_writers;
        let size = match new.volume {
            true => &storage.volume_size,
            false => &storage.session_size,
        };
        let claim = PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(new.name.to_string()),
                labels: Some(labels),
                annotations: (!new.annotations.is_empty()).then_some(new.annotations),
                owner_references: new.owned.then(|| vec![self.owner_reference()]),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec![match many {
                    true => "ReadWriteMany".into(),
                    false => "ReadWriteOnce".into(),
                }]),
                storage_class_name: storage.class.clone(),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".to_string(),
                        Quantity(size.clone()),
                    )])),
                    ..Default::default()
                }),
                data_source: new.clone_of.map(|from| TypedLocalObjectReference {
                    api_group: None,
                    kind: "PersistentVolumeClaim".into(),
                    name: from.to_string(),
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        self.claims()
            .create(&PostParams::default(), &claim)
            .await
            .map(ClaimRecord::from)
            .map_err(|e| {
                Call::new(
                    "create",
                    "persistentvolumeclaims",
                    self.namespace(),
                    new.name,
                )
                .error(e)
            })
    }

    /// The claim `name`, if it exists and is not being deleted (a deleted
    /// claim stays until no pod uses it).
    pub(crate) async fn claim(&self, name: &str) -> Result<Option<ClaimRecord>> {
        match self.claims().get(name).await {
            Ok(claim) if claim.metadata.deletion_timestamp.is_some() => Ok(None),
            Ok(claim) => Ok(Some(claim.into())),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => {
                Err(Call::new("get", "persistentvolumeclaims", self.namespace(), name).error(e))
            }
        }
    }

    /// Whether the claim `name` lets pods on several nodes write it.
    pub(crate) async fn claim_shared(&self, name: &str) -> Result<bool> {
        match self.claims().get(name).await {
            Ok(claim) => Ok(claim
                .spec
                .and_then(|s| s.access_modes)
                .unwrap_or_default()
                .iter()
                .any(|m| m == "ReadWriteMany")),
            Err(e) if is_not_found(&e) => Ok(false),
            Err(e) => {
                Err(Call::new("get", "persistentvolumeclaims", self.namespace(), name).error(e))
            }
        }
    }

    /// dockhand's claims with the label `key` (any value), or `key=value`.
    pub(crate) async fn claims_labelled(&self, selector: &str) -> Result<Vec<ClaimRecord>> {
        let list = self
            .claims()
            .list(&ListParams::default().labels(selector))
            .await
            .map_err(|e| {
                Call::new("list", "persistentvolumeclaims", self.namespace(), "").error(e)
            })?;
        Ok(list
            .items
            .into_iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .map(ClaimRecord::from)
            .collect())
    }

    /// Sets (or, with `None`, removes) annotations of the claim `name`.
    pub(crate) async fn annotate_claim(
        &self,
        name: &str,
        annotations: &BTreeMap<String, Option<String>>,
    ) -> Result<()> {
        let patch = serde_json::json!({"metadata": {"annotations": annotations}});
        self.claims()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|e| {
                Call::new("patch", "persistentvolumeclaims", self.namespace(), name).error(e)
            })
    }

    /// Pods not ended that mount the claim `name`, each with whether it
    /// mounts it read-only and the node it is on.
    pub(crate) async fn claim_users(&self, name: &str) -> Result<Vec<ClaimUser>> {
        Ok(self
            .claims_mounted()
            .await?
            .into_iter()
            .filter(|(claim, _)| claim == name)
            .map(|(_, user)| user)
            .collect())
    }

    /// Every claim mounted by a pod of dockhand's not ended, with that pod.
    pub(crate) async fn claims_mounted(&self) -> Result<Vec<(String, ClaimUser)>> {
        let pods = self
            .pods()
            .list(&ListParams::default().labels(&format!("{}=true", labels::MANAGED)))
            .await
            .map_err(|e| Call::new("list", "pods", self.namespace(), "").error(e))?;
        let mut mounted = Vec::new();
        for pod in pods.items {
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if matches!(phase, Some("Succeeded" | "Failed"))
                || pod.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            let Some(spec) = pod.spec else { continue };
            let name = pod.metadata.name.unwrap_or_default();
            for volume in spec.volumes.iter().flatten() {
                if let Some(source) = &volume.persistent_volume_claim {
                    let user = ClaimUser {
                        pod: name.clone(),
                        read_only: source.read_only.unwrap_or(false),
                        node: spec.node_name.clone(),
                    };
                    mounted.push((source.claim_name.clone(), user));
                }
            }
        }
        Ok(mounted)
    }

    /// Deletes the claim `name` unless a pod uses it (`false` then); one
    /// already gone is fine.
    pub(crate) async fn delete_claim(&self, name: &str) -> Result<bool> {
        if !self.claim_users(name).await?.is_empty() {
            return Ok(false);
        }
        match self.claims().delete(name, &DeleteParams::default()).await {
            Ok(_) => Ok(true),
            Err(e) if is_not_found(&e) => Ok(true),
            Err(e) => {
                Err(Call::new("delete", "persistentvolumeclaims", self.namespace(), name).error(e))
            }
        }
    }

    /// A guard deleting the claim `name` when dropped, unless released.
    pub(crate) fn claim_guard(&self, name: &str) -> FilesClaim {
        FilesClaim {
            claims: self.claims(),
            name: name.to_string(),
            armed: true,
        }
    }

    /// Copies every file of claim `from` into claim `to` (made empty
    /// already), with a pod of `image` that runs `cp -a` as `user`
    /// (`uid:gid`), on the node a pod using `from` runs on if any (a
    /// `ReadWriteOnce` claim is mounted on one node at a time). The pod is
    /// owned from before its create request and deleted once the copy ends.
    pub(crate) async fn copy_claim(
        &self,
        from: &str,
        to: &str,
        image: &str,
        user: Option<(i64, i64)>,
    ) -> Result<()> {
        let node = self
            .claim_users(from)
            .await?
            .into_iter()
            .find_map(|u| u.node);
        let name = crate::manifests::pod_name(&format!(
            "dockhand-copy-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..10]
        ));
        let claim = |volume: &str, claim: &str, read_only: bool| Volume {
            name: volume.into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.into(),
                read_only: Some(read_only),
            }),
            ..Default::default()
        };
        let mount = |volume: &str, read_only: bool| VolumeMount {
            name: volume.into(),
            mount_path: format!("/{volume}"),
            read_only: Some(read_only),
            ..Default::default()
        };
        // A small request, so a copy fits beside the session it copies on
        // a full node; a larger limit, so it goes at the node's pace.
        let requests = BTreeMap::from([
            ("cpu".to_string(), Quantity("50m".into())),
            ("memory".to_string(), Quantity("32Mi".into())),
        ]);
        let limits = BTreeMap::from([
            ("cpu".to_string(), Quantity("1".into())),
            ("memory".to_string(), Quantity("256Mi".into())),
        ]);
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(BTreeMap::from([
                    (labels::MANAGED.to_string(), "true".to_string()),
                    (labels::KIND.to_string(), "copy".to_string()),
                    (super::NETWORK_LABEL.to_string(), "none".to_string()),
                ])),
                owner_references: Some(vec![self.owner_reference()]),
                ..Default::default()
            },
            spec: Some(PodSpec {
                // Scheduled (not bound by name, which skips the scheduler's
                // check for room) onto the node.
                affinity: node.map(on_node),
                restart_policy: Some("Never".into()),
                automount_service_account_token: Some(false),
                enable_service_links: Some(false),
                security_context: Some(PodSecurityContext {
                    seccomp_profile: Some(k8s_openapi::api::core::v1::SeccompProfile {
                        type_: "RuntimeDefault".into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                containers: vec![Container {
                    name: "copy".into(),
                    image: Some(image.to_string()),
                    image_pull_policy: Some("IfNotPresent".into()),
                    // Each entry of the source, hidden ones too, links as
                    // links: `cp -a /from/. /to` would also set the
                    // target's root, which the copier does not own.
                    command: Some(vec!["sh".into(), "-c".into(), COPY_SCRIPT.into()]),
                    security_context: Some(SecurityContext {
                        run_as_user: user.map(|(uid, _)| uid),
                        run_as_group: user.map(|(_, gid)| gid),
                        allow_privilege_escalation: Some(false),
                        read_only_root_filesystem: Some(true),
                        // The session's own user reads and writes its own
                        // files; the image's user (root, often) keeps what
                        // it takes to copy files of any owner as they are.
                        capabilities: Some(k8s_openapi::api::core::v1::Capabilities {
                            drop: Some(vec!["ALL".into()]),
                            add: user.is_none().then(|| {
                                ["CHOWN", "FOWNER", "DAC_OVERRIDE"]
                                    .map(String::from)
                                    .to_vec()
                            }),
                        }),
                        ..Default::default()
                    }),
                    resources: Some(ResourceRequirements {
                        requests: Some(requests),
                        limits: Some(limits),
                        ..Default::default()
                    }),
                    volume_mounts: Some(vec![mount("from", true), mount("to", false)]),
                    ..Default::default()
                }],
                volumes: Some(vec![claim("from", from, true), claim("to", to, false)]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let (guard, _uid) = self.create_pod(&pod).await?;
        let ended = self
            .wait_pod_within(&name, COPY_LIMIT, |view| {
                if let Some(failure) = view.failure("copy") {
                    return Some(Err(failure.into()));
                }
                view.terminated("copy").map(Ok)
            })
            .await;
        let _ = guard.remove().await;
        match ended? {
            (0, _) => Ok(()),
            (code, reason) => Err(ClusterError::PodFailed {
                pod: name,
                reason,
                message: format!(
                    "copying claim {from} into {to} exited with {code} (a file the session's user cannot read?)"
                ),
            }
            .into()),
        }
    }
}

/// Placement on node `name` (by the node's name, as a DaemonSet's pods).
fn on_node(name: String) -> k8s_openapi::api::core::v1::Affinity {
    use k8s_openapi::api::core::v1::{
        Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    };
    Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_fields: Some(vec![NodeSelectorRequirement {
                        key: "metadata.name".into(),
                        operator: "In".into(),
                        values: Some(vec![name]),
                    }]),
                    ..Default::default()
                }],
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A pod that mounts a claim.
#[derive(Debug, Clone)]
pub(crate) struct ClaimUser {
    pub(crate) pod: String,
    pub(crate) read_only: bool,
    pub(crate) node: Option<String>,
}

/// Owns a claim a session keeps its files on: dropping it deletes the
/// claim (in the background) unless it was released, as a kept
/// session's is.
pub(crate) struct FilesClaim {
    claims: Api<PersistentVolumeClaim>,
    name: String,
    armed: bool,
}

impl FilesClaim {
    /// The claim's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Lets the claim outlive this guard (a kept session's).
    pub(crate) fn release(mut self) {
        self.armed = false;
    }

    /// Deletes the claim now; one already gone is fine. Its pods must be
    /// gone or going (the claim goes when they have).
    pub(crate) async fn remove(mut self) -> Result<()> {
        self.armed = false;
        match self
            .claims
            .delete(&self.name, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(Error::from(ClusterError::Api {
                operation: "delete",
                status: None,
                reason: "DeleteFailed".into(),
                message: format!("persistentvolumeclaim {}: {e}", self.name),
            })),
        }
    }
}

impl Drop for FilesClaim {
    fn drop(&mut self) {
        if self.armed {
            super::api::delete_in_background(
                self.claims.clone(),
                self.name.clone(),
                DeleteParams::default(),
            );
        }
    }
}

/// Labels to select dockhand's claims of one kind.
pub(crate) fn kind_selector(kind: &str) -> String {
    format!("{}=true,{}={kind}", labels::MANAGED, labels::KIND)
}

/// The annotation naming the owner lease of the process that holds a kept
/// session's claim.
pub(crate) const HOLDER: &str = "dev.dockhand.held-by";

impl Cluster {
    /// The annotation naming this process as a kept claim's holder.
    pub(crate) fn holder_annotation(&self) -> (String, String) {
        (HOLDER.to_string(), self.owner.lease_name().to_string())
    }

    /// Takes the kept session's `claim` for this process: refused while
    /// another living process holds it (its owner lease renewed).
    pub(crate) async fn hold_claim(&self, claim: &ClaimRecord) -> Result<()> {
        let own = self.owner.lease_name();
        if let Some(holder) = claim.annotations.get(HOLDER) {
            if holder != own
                && super::owner::lease_alive(&self.client, self.namespace(), holder).await?
            {
                return Err(Error::SessionUnavailable {
                    reason: format!(
                        "the kept session `{}` is held by another running process (owner lease {holder}); it is free once that process closes it or ends",
                        claim.name
                    ),
                });
            }
        }
        self.annotate_claim(
            &claim.name,
            &BTreeMap::from([(HOLDER.to_string(), Some(own.to_string()))]),
        )
        .await
    }
}
