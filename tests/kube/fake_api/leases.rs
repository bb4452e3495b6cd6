//! Leases, Secrets and NetworkPolicies of the simulated API server, with the
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
    Json(lease).into_response()
}

pub(super) async fn create_policy(
    State(fake): State<Shared>,
    Json(policy): Json<Value>,
) -> Response {
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

pub(super) async fn create_secret(
    State(fake): State<Shared>,
    Json(mut secret): Json<Value>,
) -> Response {
    let name = secret["metadata"]["name"]
        .as_str()
        .unwrap_or("")
        .to_string();
    fake.record(|r| {
        if r.secrets.contains_key(&name) {
            return status_body(
                409,
                "AlreadyExists",
                &format!("secrets \"{name}\" already exists"),
            );
        }
        r.secrets_created.push(secret.clone());
        r.uid += 1;
        secret["metadata"]["uid"] = json!(format!("22222222-0000-0000-0000-{:012}", r.uid));
        r.secrets.insert(name, secret.clone());
        (StatusCode::CREATED, Json(secret)).into_response()
    })
}

pub(super) async fn patch_secret(
    State(fake): State<Shared>,
    Path((_, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let patch: Value = serde_json::from_slice(&body).unwrap_or_default();
    fake.record(|r| match r.secrets.get_mut(&name) {
        Some(secret) => {
            if let Some(owners) = patch["metadata"].get("ownerReferences") {
                secret["metadata"]["ownerReferences"] = owners.clone();
            }
            Json(secret.clone()).into_response()
        }
        None => status_body(404, "NotFound", &format!("secrets \"{name}\" not found")),
    })
}

pub(super) async fn delete_secret(
    State(fake): State<Shared>,
    Path((_, name)): Path<(String, String)>,
) -> Response {
    match fake.record(|r| r.secrets.remove(&name)) {
        Some(secret) => Json(secret).into_response(),
        None => status_body(404, "NotFound", &format!("secrets \"{name}\" not found")),
    }
}
