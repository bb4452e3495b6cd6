//! Named volumes and a session's kept files on a cluster: each a
//! PersistentVolumeClaim (see `cluster::storage`), with the user's labels in
//! one annotation (label values on a cluster are too narrow for them).

use std::collections::{BTreeMap, HashMap};

use crate::cluster::{is_claim_name, kind_selector, Cluster, FilesClaim, NewClaim};
use crate::engine::{labels, VolumeRecord};
use crate::error::{ClusterError, Error, Result};

/// The annotation holding a volume's labels, as JSON.
const LABELS: &str = "dev.dockhand.labels";
/// The kind label of volumes' claims.
const VOLUME_KIND: &str = "volume";

fn record(claim: crate::cluster::ClaimRecord) -> Option<VolumeRecord> {
    let name = claim.labels.get(labels::VOLUME)?.clone();
    let mut all: HashMap<String, String> = claim
        .annotations
        .get(LABELS)
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_default();
    all.insert(labels::VOLUME.into(), name);
    Some(VolumeRecord {
        name: claim.name,
        labels: all,
        created: claim.created,
    })
}

/// Refuses a volume name a claim cannot have.
fn claim_name(docker_name: &str) -> Result<()> {
    match is_claim_name(docker_name) {
        true => Ok(()),
        false => Err(Error::spec(
            "volume",
            format!(
                "`{docker_name}` cannot name a PersistentVolumeClaim: on a cluster a volume's name takes lowercase letters, digits, `-` and `.`, and ends with a letter or digit"
            ),
        )),
    }
}

pub(super) async fn create_volume(
    cluster: &Cluster,
    name: &str,
    extra: HashMap<String, String>,
) -> Result<VolumeRecord> {
    claim_name(name)?;
    let mut user = extra;
    let volume = user.remove(labels::VOLUME).unwrap_or_default();
    let mut annotations = BTreeMap::new();
    if !user.is_empty() {
        annotations.insert(
            LABELS.to_string(),
            serde_json::to_string(&user).unwrap_or_default(),
        );
    }
    let made = cluster
        .create_claim(NewClaim {
            name,
            kind: VOLUME_KIND,
            labels: BTreeMap::from([(labels::VOLUME.to_string(), volume.clone())]),
            annotations,
            owned: false,
            volume: true,
            clone_of: None,
        })
        .await
        .map_err(|e| match e {
            Error::Cluster(ClusterError::Conflict { .. }) => Error::spec(
                "volume",
                format!("a volume named `{volume}` exists already (or is still being removed)"),
            ),
            other => other,
        })?;
    user.insert(labels::VOLUME.into(), volume);
    Ok(VolumeRecord {
        name: name.to_string(),
        labels: user,
        created: made.created,
    })
}

pub(super) async fn volume(cluster: &Cluster, name: &str) -> Result<Option<VolumeRecord>> {
    if !is_claim_name(name) {
        return Ok(None);
    }
    Ok(cluster.claim(name).await?.and_then(record))
}

pub(super) async fn volumes(cluster: &Cluster) -> Result<Vec<VolumeRecord>> {
    Ok(cluster
        .claims_labelled(&kind_selector(VOLUME_KIND))
        .await?
        .into_iter()
        .filter_map(record)
        .collect())
}

pub(super) async fn remove_volume(cluster: &Cluster, name: &str) -> Result<bool> {
    if !is_claim_name(name) {
        return Ok(true);
    }
    cluster.delete_claim(name).await
}

/// Refuses a session that would write a volume another pod writes, where
/// the volume's claim takes one writer (`ReadWriteOnce`).
pub(super) async fn check_writers(cluster: &Cluster, writes: &[(&str, String)]) -> Result<()> {
    for (volume, claim) in writes {
        claim_name(claim)?;
        if cluster.claim_shared(claim).await? {
            continue;
        }
        let writers: Vec<String> = cluster
            .claim_users(claim)
            .await?
            .into_iter()
            .filter(|u| !u.read_only)
            .map(|u| u.pod)
            .collect();
        if let Some(pod) = writers.first() {
            return Err(Error::spec(
                "session",
                format!(
                    "volume `{volume}` is written by pod {pod} already, and its claim takes one writer at a time (ReadWriteOnce): mount it read-only here (volume_read_only), close the other session first, or use a storage class that lets several pods write (KubeConfig::storage with Storage::shared_writers)"
                ),
            ));
        }
    }
    Ok(())
}

/// The kind label of sessions' kept files.
pub(crate) const FILES_KIND: &str = "session-files";
/// Annotations a kept session's claim records for the process that
/// resumes it: the image its pod ran, and where the claim was mounted.
pub(crate) const IMAGE: &str = "dev.dockhand.image";
pub(crate) const WORKSPACE: &str = "dev.dockhand.workspace";

/// A claim for a session's files: a copy of `from` if given (a fork or a
/// snapshot), owned by this process unless `kept`.
pub(super) async fn files_claim(
    cluster: &Cluster,
    about: &super::FilesOf<'_>,
) -> Result<FilesClaim> {
    let prefix = match about.kind {
        Some(super::SNAPSHOT_KIND) => "dockhand-snapshot",
        _ => "dockhand-files",
    };
    let name = crate::manifests::pod_name(&format!(
        "{prefix}-{}-{}",
        about.session_name,
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    ));
    let mut claim_labels = BTreeMap::new();
    if about.kept {
        claim_labels.insert(labels::KEPT.to_string(), "true".to_string());
    }
    let mut annotations = BTreeMap::from([
        (IMAGE.to_string(), about.image.to_string()),
        (WORKSPACE.to_string(), about.workspace.to_string()),
        (
            "dev.dockhand.session-name".to_string(),
            about.session_name.to_string(),
        ),
    ]);
    // A kept session's claim is held by its process from its creation; a
    // snapshot's by none.
    if about.kept && about.kind.is_none() {
        let (key, holder) = cluster.holder_annotation();
        annotations.insert(key, holder);
    }
    let clone = about.from.filter(|_| cluster.storage().clones);
    // Owned from before its create request: a dropped start or a failed
    // copy removes it.
    let guard = cluster.claim_guard(&name);
    cluster
        .create_claim(NewClaim {
            name: &name,
            kind: about.kind.unwrap_or(FILES_KIND),
            labels: claim_labels,
            annotations,
            owned: !about.kept,
            volume: false,
            clone_of: clone,
        })
        .await?;
    if let (Some(from), None) = (about.from, clone) {
        cluster
            .copy_claim(from, &name, about.image, about.user)
            .await?;
    }
    Ok(guard)
}

/// The claim `id` if it is a kept session's.
async fn kept_claim(cluster: &Cluster, id: &str) -> Result<Option<crate::cluster::ClaimRecord>> {
    if !is_claim_name(id) {
        return Ok(None);
    }
    Ok(cluster.claim(id).await?.filter(is_kept))
}

/// Whether `claim` holds a kept session's files.
fn is_kept(claim: &crate::cluster::ClaimRecord) -> bool {
    claim.labels.get(labels::KEPT).map(String::as_str) == Some("true")
        && claim.labels.get(labels::KIND).map(String::as_str) == Some(FILES_KIND)
}

fn kept_of(claim: crate::cluster::ClaimRecord, running: bool) -> super::KeptFiles {
    let note = |key: &str| claim.annotations.get(key).cloned();
    super::KeptFiles {
        image: note(IMAGE).unwrap_or_default(),
        workspace: note(WORKSPACE).unwrap_or_default(),
        session_name: note("dev.dockhand.session-name"),
        created: claim.created.clone(),
        name: claim.name,
        running,
    }
}

/// The kept session `id`'s claim taken for this process (refused while
/// another living process holds it), owned by a guard that leaves it in
/// place; `None` if there is no such claim.
pub(super) async fn hold_kept(
    cluster: &Cluster,
    id: &str,
) -> Result<Option<(super::KeptFiles, FilesClaim)>> {
    let Some(claim) = kept_claim(cluster, id).await? else {
        return Ok(None);
    };
    cluster.hold_claim(&claim).await?;
    Ok(Some((kept_of(claim, false), cluster.claim_guard(id))))
}

/// Every kept session's claim in the namespace, each with whether a pod
/// runs on it.
pub(super) async fn kept_list(cluster: &Cluster) -> Result<Vec<super::KeptFiles>> {
    let selector = format!("{},{}=true", kind_selector(FILES_KIND), labels::KEPT);
    let mounted: std::collections::HashSet<String> = cluster
        .claims_mounted()
        .await?
        .into_iter()
        .map(|(claim, _)| claim)
        .collect();
    Ok(cluster
        .claims_labelled(&selector)
        .await?
        .into_iter()
        .map(|claim| {
            let running = mounted.contains(&claim.name);
            kept_of(claim, running)
        })
        .collect())
}

/// Every snapshot's claim in the namespace.
pub(super) async fn snapshot_list(cluster: &Cluster) -> Result<Vec<super::KeptFiles>> {
    Ok(cluster
        .claims_labelled(&kind_selector(super::SNAPSHOT_KIND))
        .await?
        .into_iter()
        .map(|claim| kept_of(claim, false))
        .collect())
}

/// Removes the snapshot claim `name` (refused while a copy reads it); one
/// gone already is fine.
pub(super) async fn remove_snapshot(cluster: &Cluster, name: &str) -> Result<()> {
    let Some(claim) = cluster.claim(name).await? else {
        return Ok(());
    };
    if claim.labels.get(labels::KIND).map(String::as_str) != Some(super::SNAPSHOT_KIND) {
        return Err(Error::spec(
            "snapshot",
            format!("`{name}` is not a snapshot's claim (Client::snapshots lists them)"),
        ));
    }
    if !cluster.delete_claim(name).await? {
        return Err(Error::spec(
            "snapshot",
            format!("snapshot `{name}` is being copied from; remove it once the session starting from it has started"),
        ));
    }
    Ok(())
}

/// Whether a pod runs on the kept claim `id` now.
pub(super) async fn in_use(cluster: &Cluster, id: &str) -> Result<bool> {
    Ok(!cluster.claim_users(id).await?.is_empty())
}

/// Removes the kept claim `id` and the pods on it (the claim goes once
/// they have); one gone already, or not a kept session's, is left.
pub(super) async fn remove_kept(cluster: &Cluster, id: &str) -> Result<()> {
    if !is_claim_name(id) {
        return Ok(());
    }
    let Some(claim) = cluster.claim(id).await? else {
        return Ok(());
    };
    if !is_kept(&claim) {
        return Err(Error::SessionUnavailable {
            reason: format!(
                "`{id}` is not a kept session's claim (Client::kept_sessions lists them)"
            ),
        });
    }
    for user in cluster.claim_users(id).await? {
        cluster.delete_pod(&user.pod).await?;
    }
    cluster.claim_guard(id).remove().await
}
