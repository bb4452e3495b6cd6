//! One-shot pools on agent-sandbox (kubernetes-sigs/agent-sandbox), where
//! the cluster serves its extensions: a `SandboxTemplate` of the pool's pod
//! and a `SandboxWarmPool` keep pods started, each run claims one with a
//! `SandboxClaim`, and deleting the claim removes its sandbox and pod.
//!
//! The template, the warm pool and every claim are owned by this process's
//! lease, so the garbage collector removes them (and through them the
//! sandboxes and pods) when the process dies.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, PostParams};
use kube::Api;
use serde_json::json;

use super::api::{delete_in_background, is_not_found, Call};
use super::owned::Companion;
use super::Cluster;
use crate::error::{Error, Result};
use crate::warm::PoolStats;

const GROUP: &str = "extensions.agents.x-k8s.io";
const VERSION: &str = "v1beta1";
/// The label that ties a pool's pods to it, for counting the ready ones.
const POOL_LABEL: &str = "dev.dockhand.pool";
/// The label agent-sandbox puts on a claimed sandbox's pod.
const CLAIMED_LABEL: &str = "agents.x-k8s.io/claim-uid";

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: format!("{GROUP}/{VERSION}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

impl Cluster {
    /// Whether one-shot pools go through agent-sandbox here: as
    /// [`KubeConfig::agent_sandbox`](super::KubeConfig::agent_sandbox) says,
    /// else whether the API server serves its extensions (asked once).
    pub(crate) async fn uses_agent_sandbox(&self) -> Result<bool> {
        if self.agent_sandbox == Some(false) {
            return Ok(false);
        }
        let served = *self
            .agent_sandbox_served
            .get_or_try_init(|| async {
                let version = format!("{GROUP}/{VERSION}");
                match self.client.list_api_group_resources(&version).await {
                    Ok(list) => Ok(["sandboxtemplates", "sandboxwarmpools", "sandboxclaims"]
                        .iter()
                        .all(|plural| list.resources.iter().any(|r| r.name == *plural))),
                    Err(e) if is_not_found(&e) => Ok(false),
                    Err(e) => Err(Call::new("get", "apis", self.namespace(), &version).error(e)),
                }
            })
            .await?;
        if !served && self.agent_sandbox == Some(true) {
            return Err(super::unsupported(
                "agent-sandbox warm pools",
                format!(
                    "the cluster does not serve {GROUP}/{VERSION}: install agent-sandbox's \
                     extensions (docs/scale-out.md), or leave KubeConfig::agent_sandbox unset \
                     so pools make their own pods"
                ),
            ));
        }
        Ok(served)
    }

    fn custom(&self, kind: &str, plural: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            &self.namespace,
            &resource(kind, plural),
        )
    }
}

/// A pool's `SandboxTemplate` and `SandboxWarmPool`: deleted on
/// [`AgentPool::shutdown`], or in the background when dropped.
struct PoolObjects {
    templates: Api<DynamicObject>,
    pools: Api<DynamicObject>,
    config_maps: Api<ConfigMap>,
    template: String,
    pool: String,
    /// The ConfigMaps the pool's pods share (a session's agent).
    maps: Vec<String>,
    /// Cleared once `shutdown` deleted them.
    armed: AtomicBool,
}

impl Drop for PoolObjects {
    fn drop(&mut self) {
        if self.armed.load(Ordering::Relaxed) {
            // The pool first: its unclaimed sandboxes go with it.
            delete_in_background(
                self.pools.clone(),
                self.pool.clone(),
                DeleteParams::default(),
            );
            delete_in_background(
                self.templates.clone(),
                self.template.clone(),
                DeleteParams::default(),
            );
            for map in &self.maps {
                delete_in_background(
                    self.config_maps.clone(),
                    map.clone(),
                    DeleteParams::default(),
                );
            }
        }
    }
}

/// A one-shot pool on agent-sandbox.
pub(crate) struct AgentPool {
    claims: Api<DynamicObject>,
    pods: Api<Pod>,
    namespace: String,
    owner: OwnerReference,
    labels: BTreeMap<String, String>,
    replicas: usize,
    /// The container whose start makes a pod ready for a claim.
    ready_when: &'static str,
    objects: PoolObjects,
    ready: AtomicUsize,
    handed_over: AtomicU64,
    misses: AtomicU64,
}

/// A claimed sandbox's pod, owned through its claim: dropping it deletes
/// the claim (and so the sandbox) and the pod, in the background.
pub(crate) struct ClaimGuard {
    claims: Api<DynamicObject>,
    pods: Api<Pod>,
    claim: String,
    pod: Option<String>,
    armed: bool,
}

impl ClaimGuard {
    /// The claimed pod's name.
    pub(crate) fn pod(&self) -> &str {
        self.pod.as_deref().unwrap_or_default()
    }

    /// Deletes the claim, then the pod (the sandbox's controller would take
    /// a while); either one already gone is fine.
    pub(crate) async fn remove(mut self) -> Result<()> {
        self.armed = false;
        let ns = self.claims.namespace().unwrap_or_default().to_string();
        match self
            .claims
            .delete(&self.claim, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(Call::new("delete", "sandboxclaims", &ns, &self.claim).error(e)),
        }
        if let Some(pod) = &self.pod {
            match self
                .pods
                .delete(pod, &DeleteParams::default().grace_period(0))
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(Call::new("delete", "pods", &ns, pod).error(e)),
            }
        }
        Ok(())
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        if self.armed {
            delete_in_background(
                self.claims.clone(),
                self.claim.clone(),
                DeleteParams::default(),
            );
            if let Some(pod) = self.pod.take() {
                delete_in_background(
                    self.pods.clone(),
                    pod,
                    DeleteParams::default().grace_period(0),
                );
            }
        }
    }
}

impl AgentPool {
    /// Makes the ConfigMaps among `companions` (the pods share them), the
    /// template of `pod` (labels and spec; its name is the controller's to
    /// give) and a warm pool of `replicas`, all named after `pod`'s name and
    /// owned by this process's lease. A pod counts as ready once its
    /// container `ready_when` runs.
    pub(crate) async fn open(
        cluster: &Cluster,
        mut pod: Pod,
        companions: Vec<Companion>,
        (egress, ready_when): (bool, &'static str),
        replicas: usize,
    ) -> Result<AgentPool> {
        let mut maps = Vec::new();
        for companion in companions {
            match companion {
                Companion::ConfigMap(name, map) => maps.push((name, map)),
                _ => {
                    return Err(Error::spec(
                        "kubernetes",
                        "an agent-sandbox pool's pods share their objects: secrets and allow-lists are each pod's own",
                    ))
                }
            }
        }
        let base = pod.metadata.name.clone().unwrap_or_default();
        let (template_name, pool_name) = (format!("{base}-template"), format!("{base}-pool"));
        let mut labels = pod.metadata.labels.take().unwrap_or_default();
        labels.insert(crate::engine::labels::KIND.into(), "pool".into());
        let mut pod_labels = labels.clone();
        pod_labels.insert(POOL_LABEL.into(), pool_name.clone());
        let owner = cluster.owner_reference();
        let meta = |name: &str| ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(cluster.namespace().to_string()),
            labels: Some(labels.clone()),
            owner_references: Some(vec![owner.clone()]),
            ..Default::default()
        };
        let size = i32::try_from(replicas).unwrap_or(i32::MAX);
        let (template, pool) = crate::manifests::agent_pool(
            meta(&template_name),
            meta(&pool_name),
            pod_labels,
            pod.spec.take().unwrap_or_default(),
            egress,
            size,
        );
        let objects = PoolObjects {
            templates: cluster.custom("SandboxTemplate", "sandboxtemplates"),
            pools: cluster.custom("SandboxWarmPool", "sandboxwarmpools"),
            config_maps: Api::namespaced(cluster.client.clone(), cluster.namespace()),
            template: template_name,
            pool: pool_name,
            maps: maps.iter().map(|(name, _)| name.clone()).collect(),
            armed: AtomicBool::new(true),
        };
        let like = ObjectMeta {
            labels: Some(labels.clone()),
            ..Default::default()
        };
        for (name, map) in maps {
            cluster.create_companion(&name, map, &like).await?;
        }
        create(
            &objects.templates,
            "sandboxtemplates",
            cluster.namespace(),
            &template,
        )
        .await?;
        create(
            &objects.pools,
            "sandboxwarmpools",
            cluster.namespace(),
            &pool,
        )
        .await?;
        Ok(AgentPool {
            claims: cluster.custom("SandboxClaim", "sandboxclaims"),
            pods: cluster.pods(),
            namespace: cluster.namespace().to_string(),
            owner,
            labels,
            replicas,
            ready_when,
            objects,
            ready: AtomicUsize::new(0),
            handed_over: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        })
    }

    /// Claims a sandbox of the pool and returns its pod, once the claim is
    /// bound; `None` (a miss: the run starts cold) when it is not bound
    /// within `wait`. The pod may still be starting: the caller waits for it.
    pub(crate) async fn claim(&self, wait: Duration) -> Result<Option<ClaimGuard>> {
        let name = crate::manifests::pod_name(&format!(
            "{}-{}",
            self.objects.pool,
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        ));
        let mut labels = self.labels.clone();
        labels.insert(crate::engine::labels::KIND.into(), "claim".into());
        let claim = json!({
            "apiVersion": format!("{GROUP}/{VERSION}"),
            "kind": "SandboxClaim",
            "metadata": {
                "name": name,
                "labels": labels,
                "ownerReferences": [self.owner],
            },
            "spec": {"warmPoolRef": {"name": self.objects.pool}},
        });
        let mut guard = ClaimGuard {
            claims: self.claims.clone(),
            pods: self.pods.clone(),
            claim: name.clone(),
            pod: None,
            armed: true,
        };
        create(&self.claims, "sandboxclaims", &self.namespace, &claim).await?;
        let bound = super::watch::watch_until(
            &self.claims,
            "sandboxclaims",
            &self.namespace,
            &name,
            |claim| bound_sandbox(claim).map(Ok),
        );
        let until = tokio::time::Instant::now() + wait;
        let sandbox = match tokio::time::timeout_at(until, bound).await {
            Ok(bound) => bound?,
            Err(_) => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                return Ok(None);
            }
        };
        // agent-sandbox names a claimed sandbox's pod after it; a sandbox
        // it had to start for the claim may not have its pod yet.
        guard.pod = Some(sandbox.clone());
        loop {
            match self.pods.get_opt(&sandbox).await {
                Ok(Some(_)) => break,
                Ok(None) if tokio::time::Instant::now() < until => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(None) => {
                    self.misses.fetch_add(1, Ordering::Relaxed);
                    return Ok(None);
                }
                Err(e) => return Err(Call::new("get", "pods", &self.namespace, &sandbox).error(e)),
            }
        }
        self.handed_over.fetch_add(1, Ordering::Relaxed);
        Ok(Some(guard))
    }

    /// The pool's size, the ready pods last counted, claims bound and missed.
    pub(crate) fn stats(&self) -> PoolStats {
        // The controller makes the sandboxes: `filled` and `starting` are
        // its to count, in the SandboxWarmPool's status.
        let handed_over = self.handed_over.load(Ordering::Relaxed);
        PoolStats {
            size: self.replicas,
            ready: self.ready.load(Ordering::Relaxed),
            handed_over,
            misses: self.misses.load(Ordering::Relaxed),
            ..PoolStats::default()
        }
    }

    /// Waits until the warm pool holds its size of unclaimed pods whose
    /// `ready_when` container runs (or `timeout` passes). agent-sandbox does
    /// not count a one-shot's pods as ready (they wait in an init
    /// container), so they are counted here.
    pub(crate) async fn wait_ready(&self, timeout: Duration) -> bool {
        let until = tokio::time::Instant::now() + timeout;
        let selector = format!("{POOL_LABEL}={}", self.objects.pool);
        loop {
            if let Ok(pods) = self
                .pods
                .list(&ListParams::default().labels(&selector))
                .await
            {
                let ready = pods
                    .items
                    .iter()
                    .filter(|p| {
                        let claimed = p
                            .metadata
                            .labels
                            .as_ref()
                            .is_some_and(|l| l.contains_key(CLAIMED_LABEL));
                        !claimed && super::PodView::new(p).running(self.ready_when)
                    })
                    .count();
                self.ready.store(ready, Ordering::Relaxed);
                if ready >= self.replicas {
                    return true;
                }
            }
            if tokio::time::Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Deletes the warm pool (its unclaimed sandboxes go with it) and the
    /// template.
    pub(crate) async fn shutdown(&self) {
        let objects = &self.objects;
        objects.armed.store(false, Ordering::Relaxed);
        // The pool first: its unclaimed sandboxes go with it.
        delete_now(
            &objects.pools,
            "sandboxwarmpools",
            &self.namespace,
            &objects.pool,
        )
        .await;
        delete_now(
            &objects.templates,
            "sandboxtemplates",
            &self.namespace,
            &objects.template,
        )
        .await;
        for map in &objects.maps {
            delete_now(&objects.config_maps, "configmaps", &self.namespace, map).await;
        }
    }
}

/// Deletes `name`; one already gone is fine, and a failure is logged: the
/// owner lease collects what is left.
async fn delete_now<K>(api: &Api<K>, plural: &'static str, namespace: &str, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(e) if is_not_found(&e) => {}
        Err(e) => {
            let e = Call::new("delete", plural, namespace, name).error(e);
            tracing::warn!(error = %e, "deleting an agent-sandbox pool's object; its owner lease will collect it");
        }
    }
}

/// The sandbox a claim is bound to, once it is.
fn bound_sandbox(claim: &DynamicObject) -> Option<String> {
    let name = claim.data["status"]["sandbox"]["name"].as_str()?;
    (!name.is_empty()).then(|| name.to_string())
}

/// Creates `object` (any serializable form of a `plural`) through `api`.
async fn create(
    api: &Api<DynamicObject>,
    plural: &'static str,
    namespace: &str,
    object: &impl serde::Serialize,
) -> Result<()> {
    let value = serde_json::to_value(object)
        .map_err(|e| Error::spec("kubernetes", format!("rendering {plural}: {e}")))?;
    let name = value["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let object: DynamicObject = serde_json::from_value(value)
        .map_err(|e| Error::spec("kubernetes", format!("rendering {plural}: {e}")))?;
    api.create(&PostParams::default(), &object)
        .await
        .map_err(|e| Call::new("create", plural, namespace, &name).error(e))?;
    Ok(())
}
