//! Leases, Secrets, ConfigMaps and NetworkPolicies of the simulated API server, with the
//! garbage collector's part: a deleted lease takes the pods it owns.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::{list, matches_labels, status_body, Shared};

pub(super) async fn create_lease(
    State(fake): State<Shared>,
    Json(mut lease): Json<Value>,
) -> Response {
    let name = lease["metadata"]["name"].as_str().unwrap_or("").to_string();
    fake.record(|r| {
        if r.leases.contains_key(&name) {
            return status_body(
                409,
                "AlreadyExists",
                &format!("leases.coordination.k8s.io \"{name}\" already exists"),
            );
        }
        r.uid += 1;
        lease["metadata"]["uid"] = json!(format!("11111111-0000-0000-0000-{:012}", r.uid));
        r.leases.insert(name, lease.clone());
        (StatusCode::CREATED, Json(lease)).into_response()
    })
}

pub(super) async fn get_lease(
    State(fake): State<Shared>,
    Path((_, name)): Path<(String, String)>,
) -> Response {
    match fake.record(|r| r.leases.get(&name).cloned()) {
        Some(lease) => Json(lease).into_response(),
        None => status_body(
            404,
            "NotFound",
            &format!("leases.coordination.k8s.io \"{name}\" not found"),
        ),
    }
}

pub(super) async fn patch_lease(
    State(fake): State<Shared>,
    Path((_, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let patch: Value = serde_json::from_slice(&body).unwrap_or_default();
    fake.record(|r| match r.leases.get_mut(&name) {
        Some(lease) => {
            if let Some(renewed) = patch["spec"].get("renewTime") {
                lease["spec"]["renewTime"] = renewed.clone();
            }
            Json(lease.clone()).into_response()
        }
        None => status_body(
            404,
            "NotFound",
            &format!("leases.coordination.k8s.io \"{name}\" not found"),
        ),
    })
}

pub(super) async fn list_leases(
    State(fake): State<Shared>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let (items, rv) = fake.record(|r| {
        let items = r
            .leases
            .values()
            .filter(|l| matches_labels(l, q.get("labelSelector")))
            .cloned()
            .collect();
        (items, r.rv)
    });
    list("LeaseList", items, rv).into_response()
}

/// Deletes the lease, and (as the garbage collector would) the pods it owns.
pub(super) async fn delete_lease(
    State(fake): State<Shared>,
    Path((_, name)): Path<(String, String)>,
) -> Response {
    let Some(lease) = fake.record(|r| r.leases.remove(&name)) else {
        return status_body(
            404,
            "NotFound",
            &format!("leases.coordination.k8s.io \"{name}\" not found"),
        );
    };
    let uid = lease["metadata"]["uid"].clone();
    let owned: Vec<String> = fake.record(|r| {
        r.pods
            .iter()
            .filter(|(_, p)| {
                p["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|o| o.iter().any(|o| o["uid"] == uid))
            })
            .map(|(n, _)| n.clone())
            .collect()
    });
    for pod in owned {
        fake.remove_pod(&pod);
    }
    fake.collect_custom(&uid);
    let claims: Vec<String> = fake.record(|r| {
        r.claims
            .iter()
            .filter(|(_, c)| {
                c["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|o| o.iter().any(|o| o["uid"] == uid))
            })
            .map(|(n, _)| n.clone())
            .collect()
    });
    for claim in claims {
        fake.remove_claim(&claim);
    }
    // Companions not yet handed to a pod were the lease's.
    fake.record(|r| {
        let owned_by_lease = |o: &Value| {
            o["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|o| o.iter().any(|o| o["uid"] == uid))
        };
        r.secrets.retain(|_, s| !owned_by_lease(s));
        r.config_maps.retain(|_, m| !owned_by_lease(m));
        r.policies.retain(|_, p| !owned_by_lease(p));
    });
    Json(lease).into_response()
}

/// Creates a NetworkPolicy: the namespace's shared one, or (owned by a
/// lease, then a pod) a pod's own allow-list, kept as a companion.
pub(super) async fn create_policy(
    State(fake): State<Shared>,
    Json(policy): Json<Value>,
) -> Response {
    if policy["metadata"]["ownerReferences"].is_array() {
        return create_companion("networkpolicies", fake, policy).await;
    }
    let name = policy["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    fake.record(|r| {
        if r.policies.contains_key(&name) {
            return status_body(
                409,
                "AlreadyExists",
                &format!("networkpolicies.networking.k8s.io \"{name}\" already exists"),
            );
        }
        r.policies.insert(name, policy.clone());
        (StatusCode::CREATED, Json(policy)).into_response()
    })
}

/// Creates a Secret or ConfigMap (`kind` is the plural).
pub(super) async fn create_companion(
    kind: &'static str,
    fake: Shared,
    mut object: Value,
) -> Response {
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    fake.record(|r| {
        if r.companions(kind).contains_key(&name) {
            return status_body(
                409,
                "AlreadyExists",
                &format!("{kind} \"{name}\" already exists"),
            );
        }
        r.companions_created.push((kind, object.clone()));
        r.uid += 1;
        object["metadata"]["uid"] = json!(format!("22222222-0000-0000-0000-{:012}", r.uid));
        r.companions(kind).insert(name, object.clone());
        (StatusCode::CREATED, Json(object)).into_response()
    })
}

/// Takes a merge patch of a companion's owner references.
pub(super) async fn patch_companion(
    kind: &'static str,
    fake: Shared,
    name: String,
    body: Bytes,
) -> Response {
    let patch: Value = serde_json::from_slice(&body).unwrap_or_default();
    fake.record(|r| match r.companions(kind).get_mut(&name) {
        Some(object) => {
            if let Some(owners) = patch["metadata"].get("ownerReferences") {
                object["metadata"]["ownerReferences"] = owners.clone();
            }
            Json(object.clone()).into_response()
        }
        None => status_body(404, "NotFound", &format!("{kind} \"{name}\" not found")),
    })
}

pub(super) async fn delete_companion(kind: &'static str, fake: Shared, name: String) -> Response {
    match fake.record(|r| r.companions(kind).remove(&name)) {
        Some(object) => Json(object).into_response(),
        None => status_body(404, "NotFound", &format!("{kind} \"{name}\" not found")),
    }
}
