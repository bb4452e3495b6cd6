//! This process's owner `Lease`: renewed while the process lives, the owner
//! (by `ownerReferences`) of every object it makes, so that a dead process's
//! objects go when its lapsed lease is deleted; and the sweep that deletes
//! lapsed leases.
//!
//! On Docker the per-process watchdog does this job; it needs the daemon's
//! socket, which a cluster does not offer.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Api;

use super::api::{is_not_found, Call};
use crate::engine::labels;
use crate::error::Result;

/// How long a lease lasts unrenewed by default.
const LEASE_DURATION: Duration = Duration::from_secs(30);
/// A lease counts as lapsed this long after it expired: clocks differ.
const GRACE: Duration = Duration::from_secs(15);
/// The label naming the process that owns an object.
pub(crate) const OWNER_LABEL: &str = "dev.dockhand.owner";
/// The kind label of owner leases.
const LEASE_KIND: &str = "owner-lease";

pub(super) struct Owner {
    id: String,
    name: String,
    uid: String,
    /// Renews the lease; aborted (and the lease deleted) on drop.
    heartbeat: tokio::task::JoinHandle<()>,
    client: kube::Client,
    namespace: String,
}

impl Owner {
    /// Creates the lease (or takes over one of this process's id) and starts renewing it.
    pub(super) async fn start(
        client: kube::Client,
        namespace: &str,
        duration: Option<Duration>,
    ) -> Result<Owner> {
        let id = labels::session_id().to_string();
        // One lease per connection, not per process: dropping one client
        // must not take the pods of another client of the same process
        // with its lease. The owner label (the process) is shared.
        let connection = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let name = format!("dockhand-owner-{id}-{connection}");
        let duration = duration
            .unwrap_or(LEASE_DURATION)
            .max(Duration::from_secs(3));
        let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(
                    [
                        (labels::MANAGED.to_string(), "true".to_string()),
                        (labels::KIND.to_string(), LEASE_KIND.to_string()),
                        (OWNER_LABEL.to_string(), id.clone()),
                        (
                            labels::OWNER_PID.to_string(),
                            std::process::id().to_string(),
                        ),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(format!("{}/{}", labels::host_name(), std::process::id())),
                lease_duration_seconds: Some(duration.as_secs() as i32),
                renew_time: Some(MicroTime(now())),
                acquire_time: Some(MicroTime(now())),
                ..Default::default()
            }),
        };
        let made = leases
            .create(&PostParams::default(), &lease)
            .await
            .map_err(|e| Call::new("create", "leases", namespace, &name).error(e))?;
        let uid = made.metadata.uid.unwrap_or_default();
        let heartbeat = tokio::spawn(renew(
            client.clone(),
            namespace.to_string(),
            name.clone(),
            id.clone(),
            duration,
        ));
        Ok(Owner {
            id,
            name,
            uid,
            heartbeat,
            client,
            namespace: namespace.to_string(),
        })
    }

    pub(super) fn id(&self) -> &str {
        &self.id
    }

    /// This connection's lease.
    pub(super) fn lease_name(&self) -> &str {
        &self.name
    }

    /// Stops renewing and deletes the lease now, waiting for the answer:
    /// what it owns goes with it (the garbage collector). For an exit,
    /// where a drop's delete could not run any more.
    pub(super) async fn release(&self) -> Result<()> {
        self.heartbeat.abort();
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        match leases.delete(&self.name, &DeleteParams::background()).await {
            Ok(_) => Ok(()),
            Err(e) if is_not_found(&e) => Ok(()),
            Err(e) => Err(Call::new("delete", "leases", &self.namespace, &self.name).error(e)),
        }
    }

    pub(super) fn reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: "coordination.k8s.io/v1".into(),
            kind: "Lease".into(),
            name: self.name.clone(),
            uid: self.uid.clone(),
            ..Default::default()
        }
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.heartbeat.abort();
        // The lease's objects go with it (garbage collection, background).
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let leases: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
            let name = self.name.clone();
            runtime.spawn(async move {
                let _ = leases.delete(&name, &DeleteParams::background()).await;
            });
        }
    }
}

fn now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

/// Renews the lease every third of its duration, and sweeps lapsed ones of
/// other processes once a minute, so a dead owner's pods go even when no
/// one calls `reap()`.
async fn renew(client: kube::Client, namespace: String, name: String, id: String, every: Duration) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    let mut tick = tokio::time::interval(every / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sweeps = 0u32;
    loop {
        tick.tick().await;
        let patch = serde_json::json!({"spec": {"renewTime": MicroTime(now())}});
        if let Err(e) = leases
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(lease = %name, error = %e, "renewing the owner lease failed");
        }
        sweeps += 1;
        if sweeps.is_multiple_of(6) {
            if let Err(e) = reap(&client, &namespace, &id, &name).await {
                tracing::debug!(error = %e, "sweeping lapsed owner leases failed");
            }
        }
    }
}

/// Whether `lease` was last renewed longer ago than its duration plus a grace.
fn lapsed(lease: &Lease, at: k8s_openapi::jiff::Timestamp) -> bool {
    let Some(spec) = &lease.spec else { return true };
    let duration = spec.lease_duration_seconds.unwrap_or(30).max(0) as i64;
    let renewed = spec
        .renew_time
        .as_ref()
        .or(spec.acquire_time.as_ref())
        .map(|t| t.0);
    match renewed {
        Some(renewed) => at.as_second() - renewed.as_second() > duration + GRACE.as_secs() as i64,
        None => true,
    }
}

/// Deletes lapsed owner leases and their pods: those of dead processes, and
/// those of this process's dropped clients (their leases were to be deleted
/// as they dropped, which a runtime that was ending could not do), never
/// `own_lease`. Pods are found by their process's label (a process with no
/// live lease) and by their owner reference (a lapsed lease of a process
/// that lives on). Returns the pods' names.
pub(super) async fn reap(
    client: &kube::Client,
    namespace: &str,
    live: &str,
    own_lease: &str,
) -> Result<Vec<String>> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let managed = ListParams::default().labels(&format!("{}=true", labels::MANAGED));
    let listed = leases
        .list(
            &managed
                .clone()
                .labels(&format!("{}={LEASE_KIND}", labels::KIND)),
        )
        .await
        .map_err(|e| Call::new("list", "leases", namespace, "").error(e))?;
    let at = now();
    let mut alive = std::collections::HashSet::from([live.to_string()]);
    let mut dead = Vec::new();
    let mut dead_uids = std::collections::HashSet::new();
    for lease in listed.items {
        let owner = lease
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(OWNER_LABEL))
            .cloned()
            .unwrap_or_default();
        let name = lease.metadata.name.clone().unwrap_or_default();
        if name != own_lease && lapsed(&lease, at) {
            dead_uids.extend(lease.metadata.uid.clone());
            dead.push((name, owner));
        } else {
            alive.insert(owner);
        }
    }
    let mut removed = Vec::new();
    let listed = pods
        .list(&managed)
        .await
        .map_err(|e| Call::new("list", "pods", namespace, "").error(e))?;
    for pod in listed.items {
        let owner = pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(OWNER_LABEL));
        // Pods of no dockhand process (rendered by hand) are not ours to judge.
        let Some(owner) = owner else { continue };
        let of_dead_lease = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|r| r.kind == "Lease" && dead_uids.contains(&r.uid));
        if alive.contains(owner) && !of_dead_lease {
            continue;
        }
        let name = pod.metadata.name.unwrap_or_default();
        match pods
            .delete(&name, &DeleteParams::default().grace_period(0))
            .await
        {
            Ok(_) => removed.push(name),
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(Call::new("delete", "pods", namespace, &name).error(e)),
        }
    }
    for (name, _) in dead {
        match leases.delete(&name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(Call::new("delete", "leases", namespace, &name).error(e)),
        }
    }
    Ok(removed)
}

/// The pods `owner` made that still exist.
pub(super) async fn pods_of(
    client: &kube::Client,
    namespace: &str,
    owner: &str,
) -> Result<Vec<String>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let listed = pods
        .list(&ListParams::default().labels(&format!("{OWNER_LABEL}={owner}")))
        .await
        .map_err(|e| Call::new("list", "pods", namespace, "").error(e))?;
    Ok(listed
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect())
}

/// Whether the owner lease `name` is still held by a living process (it
/// exists and has not lapsed).
pub(super) async fn lease_alive(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<bool> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    match leases.get(name).await {
        Ok(lease) => Ok(!lapsed(&lease, now())),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(Call::new("get", "leases", namespace, name).error(e)),
    }
}
