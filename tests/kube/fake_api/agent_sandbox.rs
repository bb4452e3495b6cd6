//! agent-sandbox in the SIMULATED API server: its extensions' discovery
//! document, SandboxTemplates, SandboxWarmPools and SandboxClaims stored and
//! watched as the API server would, and a simulated controller standing in
//! for agent-sandbox's: a warm pool keeps its replicas of pods from its
//! template, a claim is bound to the oldest unclaimed one (or a pod made
//! for it) and the pool made whole again, and a deleted claim or pool takes
//! its pods with it. Only the parts dockhand relies on are acted out.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::pods::{add_pod, events_after};
use super::{list, matches_labels, status_body, Shared};

pub const GROUP_VERSION: &str = "extensions.agents.x-k8s.io/v1beta1";
/// The label agent-sandbox puts on a claimed sandbox's pod.
pub const CLAIMED_LABEL: &str = "agents.x-k8s.io/claim-uid";

/// A sandbox of a warm pool: its pod (named after it) and its claim.
#[derive(Clone, Debug)]
pub struct PoolSandbox {
    pub pool: String,
    pub claim: Option<String>,
}

fn kind_of(plural: &str) -> Option<&'static str> {
    match plural {
        "sandboxtemplates" => Some("SandboxTemplate"),
        "sandboxwarmpools" => Some("SandboxWarmPool"),
        "sandboxclaims" => Some("SandboxClaim"),
        _ => None,
    }
}

fn not_served() -> Response {
    status_body(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
}

/// The discovery document of agent-sandbox's extensions, when installed.
pub(super) async fn discovery(State(fake): State<Shared>) -> Response {
    if !fake.script.agent_sandbox {
        return not_served();
    }
    let resource = |plural: &str, kind: &str| {
        json!({"name": plural, "singularName": kind.to_lowercase(), "namespaced": true, "kind": kind,
               "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]})
    };
    Json(json!({
        "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
        "resources": [
            resource("sandboxtemplates", "SandboxTemplate"),
            resource("sandboxwarmpools", "SandboxWarmPool"),
            resource("sandboxclaims", "SandboxClaim"),
        ]
    }))
    .into_response()
}

/// The key of an object in the record's store and its watch events.
fn key(plural: &str, name: &str) -> String {
    format!("{plural}/{name}")
}

pub(super) async fn create(
    State(fake): State<Shared>,
    Path((ns, plural)): Path<(String, String)>,
    Json(mut object): Json<Value>,
) -> Response {
    let Some(kind) = kind_of(&plural).filter(|_| fake.script.agent_sandbox) else {
        return not_served();
    };
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    if object["kind"] != json!(kind) || object["apiVersion"] != json!(GROUP_VERSION) {
        return status_body(
            400,
            "BadRequest",
            "the object's kind or apiVersion does not match the path",
        );
    }
    if fake.record(|r| r.custom.contains_key(&key(&plural, &name))) {
        return status_body(
            409,
            "AlreadyExists",
            &format!("{plural}.extensions.agents.x-k8s.io \"{name}\" already exists"),
        );
    }
    fake.record(|r| {
        r.custom_created.push((plural.clone(), object.clone()));
        r.uid += 1;
        object["metadata"]["uid"] = json!(format!("10000000-0000-0000-0000-{:012}", r.uid));
        object["metadata"]["namespace"] = json!(ns);
    });
    fake.store(&plural, &name, "ADDED", object.clone());
    // The controller acts after the create has been answered.
    let controller = fake.clone();
    match kind {
        "SandboxWarmPool" => {
            let replicas = object["spec"]["replicas"].as_u64().unwrap_or(1);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                for _ in 0..replicas {
                    make_sandbox(&controller, &ns, &name, None);
                }
            });
        }
        "SandboxClaim" => {
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(10)).await;
                bind(&controller, &ns, &name);
            });
        }
        _ => {}
    }
    (StatusCode::CREATED, Json(object)).into_response()
}

pub(super) async fn get(
    State(fake): State<Shared>,
    Path((_, plural, name)): Path<(String, String, String)>,
) -> Response {
    match fake.record(|r| r.custom.get(&key(&plural, &name)).cloned()) {
        Some(object) => Json(object).into_response(),
        None => status_body(
            404,
            "NotFound",
            &format!("{plural}.extensions.agents.x-k8s.io \"{name}\" not found"),
        ),
    }
}

pub(super) async fn list_or_watch(
    State(fake): State<Shared>,
    Path((_, plural)): Path<(String, String)>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    if kind_of(&plural).is_none() || !fake.script.agent_sandbox {
        return not_served();
    }
    if q.get("watch").map(String::as_str) != Some("true") {
        let prefix = key(&plural, "");
        let (items, rv) = fake.record(|r| {
            let items = r
                .custom
                .iter()
                .filter(|(k, o)| {
                    k.starts_with(&prefix) && matches_labels(o, q.get("labelSelector"))
                })
                .map(|(_, o)| o.clone())
                .collect();
            (items, r.rv)
        });
        return list("List", items, rv).into_response();
    }
    let name = q
        .get("fieldSelector")
        .and_then(|f| f.strip_prefix("metadata.name="))
        .unwrap_or("");
    let since: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let changed = fake.changed.subscribe();
    let wanted = key(&plural, name);
    Body::from_stream(events_after(
        fake.clone(),
        move |n: &str, _: &serde_json::Value| n == wanted,
        since,
        changed,
    ))
    .into_response()
}

pub(super) async fn delete(
    State(fake): State<Shared>,
    Path((_, plural, name)): Path<(String, String, String)>,
) -> Response {
    match fake.remove_custom(&plural, &name) {
        Some(object) => Json(object).into_response(),
        None => status_body(
            404,
            "NotFound",
            &format!("{plural}.extensions.agents.x-k8s.io \"{name}\" not found"),
        ),
    }
}

impl super::Fake {
    /// Stores `object` under `plural`/`name` with a new version, and tells
    /// its watchers (`what`: ADDED, MODIFIED).
    fn store(&self, plural: &str, name: &str, what: &'static str, mut object: Value) {
        let rv = self.record(|r| {
            r.rv += 1;
            object["metadata"]["resourceVersion"] = json!(r.rv.to_string());
            r.custom.insert(key(plural, name), object.clone());
            r.events.push((r.rv, key(plural, name), what, object));
            r.rv
        });
        self.changed.send_replace(rv);
    }

    /// Deletes a custom object, and what the garbage collector and the
    /// controller would delete with it: a claim's pod, a pool's unclaimed ones.
    pub fn remove_custom(&self, plural: &str, name: &str) -> Option<Value> {
        let (object, pods) = self.record(|r| {
            let object = r.custom.remove(&key(plural, name))?;
            let pods: Vec<String> = r
                .sandboxes
                .iter()
                .filter(|(_, s)| match plural {
                    "sandboxclaims" => s.claim.as_deref() == Some(name),
                    "sandboxwarmpools" => s.pool == name && s.claim.is_none(),
                    _ => false,
                })
                .map(|(pod, _)| pod.clone())
                .collect();
            for pod in &pods {
                r.sandboxes.remove(pod);
            }
            r.rv += 1;
            r.events
                .push((r.rv, key(plural, name), "DELETED", object.clone()));
            Some((object, pods))
        })?;
        for pod in pods {
            self.remove_pod(&pod);
        }
        Some(object)
    }

    /// Deletes every custom object `uid` owns (a lapsed lease).
    pub(super) fn collect_custom(&self, uid: &Value) {
        let owned: Vec<(String, String)> = self.record(|r| {
            r.custom
                .iter()
                .filter(|(_, o)| {
                    o["metadata"]["ownerReferences"]
                        .as_array()
                        .is_some_and(|o| o.iter().any(|o| o["uid"] == *uid))
                })
                .filter_map(|(k, _)| k.split_once('/'))
                .map(|(p, n)| (p.to_string(), n.to_string()))
                .collect()
        });
        for (plural, name) in owned {
            self.remove_custom(&plural, &name);
        }
    }
}

/// The controller: a pod of `pool`'s template (claimed by `claim`, or
/// waiting in the pool), named as a sandbox of the pool.
fn make_sandbox(fake: &Shared, ns: &str, pool: &str, claim: Option<&str>) -> Option<String> {
    let template = fake.record(|r| {
        let pool = r.custom.get(&key("sandboxwarmpools", pool))?;
        let template = pool["spec"]["sandboxTemplateRef"]["name"].as_str()?;
        r.custom.get(&key("sandboxtemplates", template)).cloned()
    })?;
    let name = fake.record(|r| {
        r.uid += 1;
        format!("{pool}-{:05}", r.uid)
    });
    let mut labels = template["spec"]["podTemplate"]["metadata"]["labels"].clone();
    if let Some(claim) = claim {
        labels[CLAIMED_LABEL] = json!(claim);
    }
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "labels": labels,
            "ownerReferences": [{"apiVersion": "agents.x-k8s.io/v1beta1", "kind": "Sandbox",
                                 "name": name, "uid": "sandbox", "controller": true}],
        },
        "spec": template["spec"]["podTemplate"]["spec"],
    });
    fake.record(|r| {
        r.sandboxes.insert(
            name.clone(),
            PoolSandbox {
                pool: pool.to_string(),
                claim: claim.map(String::from),
            },
        )
    });
    add_pod(fake.clone(), ns.to_string(), pod);
    Some(name)
}

/// The controller binds claim `name` to the pool's oldest unclaimed
/// sandbox (or one made for it), and makes the pool whole again.
fn bind(fake: &Shared, ns: &str, name: &str) {
    let Some(claim) = fake.record(|r| r.custom.get(&key("sandboxclaims", name)).cloned()) else {
        return;
    };
    if fake.script.claims_unbound {
        return;
    }
    let pool = claim["spec"]["warmPoolRef"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let warm = fake.record(|r| {
        let oldest = r
            .pods
            .iter()
            .filter(|(pod, _)| {
                r.sandboxes
                    .get(*pod)
                    .is_some_and(|s| s.pool == pool && s.claim.is_none())
            })
            // Uids grow with each create: the smallest is the oldest.
            .min_by_key(|(_, p)| p["metadata"]["uid"].as_str().unwrap_or("").to_string())
            .map(|(pod, _)| pod.clone())?;
        if let Some(s) = r.sandboxes.get_mut(&oldest) {
            s.claim = Some(name.to_string());
        }
        Some(oldest)
    });
    let sandbox = match warm {
        Some(pod) => {
            fake.record(|r| r.warm_claims += 1);
            fake.update(&pod, |p| {
                p["metadata"]["labels"][CLAIMED_LABEL] = json!(name)
            });
            make_sandbox(fake, ns, &pool, None);
            Some(pod)
        }
        None => make_sandbox(fake, ns, &pool, Some(name)),
    };
    let Some(sandbox) = sandbox else {
        return;
    };
    let mut claim = claim;
    claim["status"] = json!({
        "sandbox": {"name": sandbox},
        "conditions": [{"type": "Ready", "status": "False", "reason": "SandboxNotReady",
                        "message": "Sandbox is not ready", "lastTransitionTime": "2026-11-26T12:00:00Z"}],
    });
    fake.store("sandboxclaims", name, "MODIFIED", claim);
}
