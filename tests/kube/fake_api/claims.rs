//! PersistentVolumeClaims of the simulated API server: bound at once, each
//! to a directory of the simulated node's (the Docker-backed kubelet mounts
//! it), gone with their owner lease or when deleted.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::{list, matches_labels, status_body, Shared};

fn not_found(name: &str) -> Response {
    status_body(
        404,
        "NotFound",
        &format!("persistentvolumeclaims \"{name}\" not found"),
    )
}

pub(super) async fn create(State(fake): State<Shared>, Json(mut claim): Json<Value>) -> Response {
    let name = claim["metadata"]["name"].as_str().unwrap_or("").to_string();
    fake.record(|r| {
        if r.claims.contains_key(&name) {
            return status_body(
                409,
                "AlreadyExists",
                &format!("persistentvolumeclaims \"{name}\" already exists"),
            );
        }
        r.uid += 1;
        r.rv += 1;
        claim["metadata"]["uid"] = json!(format!("33333333-0000-0000-0000-{:012}", r.uid));
        claim["metadata"]["resourceVersion"] = json!(r.rv.to_string());
        claim["metadata"]["creationTimestamp"] = json!("2026-12-07T12:00:00Z");
        claim["status"] = json!({"phase": "Bound",
            "accessModes": claim["spec"]["accessModes"].clone()});
        r.claims_created.push(claim.clone());
        r.claims.insert(name, claim.clone());
        (StatusCode::CREATED, Json(claim)).into_response()
    })
}

pub(super) async fn get(
    State(fake): State<Shared>,
    Path((_, name)): Path<(String, String)>,
) -> Response {
    match fake.record(|r| r.claims.get(&name).cloned()) {
        Some(claim) => Json(claim).into_response(),
        None => not_found(&name),
    }
}

pub(super) async fn list_claims(
    State(fake): State<Shared>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let (items, rv) = fake.record(|r| {
        let items = r
            .claims
            .values()
            .filter(|c| matches_labels(c, q.get("labelSelector")))
            .cloned()
            .collect();
        (items, r.rv)
    });
    list("PersistentVolumeClaimList", items, rv).into_response()
}

/// A merge patch of annotations.
pub(super) async fn patch(
    State(fake): State<Shared>,
    Path((_, name)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let patch: Value = serde_json::from_slice(&body).unwrap_or_default();
    fake.record(|r| match r.claims.get_mut(&name) {
        Some(claim) => {
            for (key, value) in patch["metadata"]["annotations"]
                .as_object()
                .into_iter()
                .flatten()
            {
                let annotations = &mut claim["metadata"]["annotations"];
                if !annotations.is_object() {
                    *annotations = json!({});
                }
                match value {
                    Value::Null => {
                        annotations.as_object_mut().map(|a| a.remove(key));
                    }
                    v => annotations[key] = v.clone(),
                }
            }
            Json(claim.clone()).into_response()
        }
        None => not_found(&name),
    })
}

pub(super) async fn delete(
    State(fake): State<Shared>,
    Path((_, name)): Path<(String, String)>,
) -> Response {
    match fake.remove_claim(&name) {
        Some(claim) => Json(claim).into_response(),
        None => not_found(&name),
    }
}
