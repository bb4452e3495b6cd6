//! E2B's snapshots: `create_snapshot()` commits a sandbox's files to an
//! image (the sandbox runs on), `Sandbox.create(<snapshot id>)` starts new
//! sandboxes from it, `list_snapshots()` and `delete_snapshot()` manage
//! them. A snapshot belongs to the key that made it; it outlives its
//! sandbox, and with a state directory the server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};

use super::control::{api_error, not_found};
use super::{json_or_default, lock, Server};

/// One snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// What clients name it by (also its template id).
    pub id: String,
    pub tenant: usize,
    pub key_hash: String,
    /// The template its sandbox came from: what sandboxes from it are.
    pub template: String,
    /// Its image on the daemon.
    pub image: String,
    pub names: Vec<String>,
    pub source: String,
    pub created: DateTime<Utc>,
}

/// The snapshots a server holds.
#[derive(Default)]
pub struct Snapshots {
    by_id: Mutex<HashMap<String, Arc<Snapshot>>>,
}

impl Snapshots {
    /// `tenant`'s snapshot named `id` (by its id or one of its names).
    pub fn owned(&self, tenant: usize, id: &str) -> Option<Arc<Snapshot>> {
        lock(&self.by_id)
            .values()
            .find(|s| s.tenant == tenant && (s.id == id || s.names.iter().any(|n| n == id)))
            .cloned()
    }

    pub fn insert(&self, snapshot: Snapshot) -> Arc<Snapshot> {
        let snapshot = Arc::new(snapshot);
        lock(&self.by_id).insert(snapshot.id.clone(), snapshot.clone());
        snapshot
    }

    fn remove(&self, id: &str) -> Option<Arc<Snapshot>> {
        lock(&self.by_id).remove(id)
    }

    fn of(&self, tenant: usize) -> Vec<Arc<Snapshot>> {
        let mut list: Vec<_> = lock(&self.by_id)
            .values()
            .filter(|s| s.tenant == tenant)
            .cloned()
            .collect();
        list.sort_by_key(|s| s.created);
        list
    }

    /// Every snapshot (a shutdown that removes them).
    pub fn take_all(&self) -> Vec<Arc<Snapshot>> {
        lock(&self.by_id).drain().map(|(_, s)| s).collect()
    }
}

fn info(snapshot: &Snapshot) -> Value {
    json!({"snapshotID": snapshot.id, "names": snapshot.names})
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct SnapshotRequest {
    name: Option<String>,
    memory: Option<bool>,
}

/// `POST /sandboxes/{id}/snapshots`.
pub async fn create(server: &Server, tenant: usize, id: &str, body: &[u8]) -> Response {
    let Some(sandbox) = server.registry.owned(tenant, id) else {
        return not_found(id);
    };
    let request: SnapshotRequest = match json_or_default(body) {
        Ok(r) => r,
        Err(e) => return api_error(StatusCode::BAD_REQUEST, e),
    };
    if request.memory == Some(true) {
        return api_error(
            StatusCode::NOT_IMPLEMENTED,
            "snapshots keep files only here (mode=\"filesystem\"); fork a paused sandbox's memory with dockhand's own API",
        );
    }
    if let Some(name) = &request.name {
        let ok = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !ok {
            return api_error(
                StatusCode::BAD_REQUEST,
                "a snapshot name is 1 to 64 letters, digits, `-`, `_` or `.`",
            );
        }
        if server.snapshots.owned(tenant, name).is_some() {
            return api_error(
                StatusCode::CONFLICT,
                format!("a snapshot named `{name}` exists already"),
            );
        }
    }
    if sandbox.is_paused() {
        return api_error(
            StatusCode::CONFLICT,
            format!("sandbox {id} is paused; connect() to it first"),
        );
    }
    let image = match sandbox.session.snapshot().await {
        Ok(image) => image,
        Err(e) => {
            return api_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("snapshotting sandbox {id}: {e}"),
            )
        }
    };
    let snapshot_id = format!("snap-{}", &uuid::Uuid::new_v4().simple().to_string()[..16]);
    let snapshot = server.snapshots.insert(Snapshot {
        names: vec![request.name.unwrap_or_else(|| snapshot_id.clone())],
        id: snapshot_id,
        tenant,
        key_hash: sandbox.key_hash.clone(),
        template: sandbox.template.clone(),
        image: image.image,
        source: sandbox.id.clone(),
        created: Utc::now(),
    });
    if let Some(store) = server.registry.store() {
        if let Err(e) = store.put_snapshot(&snapshot) {
            tracing::error!(snapshot = %snapshot.id, error = %e, "writing the state database");
        }
    }
    (StatusCode::CREATED, axum::Json(info(&snapshot))).into_response()
}

/// `GET /snapshots` (`sandboxID` filters by source).
pub fn list(server: &Server, tenant: usize, query: &HashMap<String, String>) -> Response {
    let list: Vec<Value> = server
        .snapshots
        .of(tenant)
        .iter()
        .filter(|s| query.get("sandboxID").is_none_or(|id| *id == s.source))
        .filter(|s| query.get("name").is_none_or(|n| s.names.contains(n)))
        .map(|s| info(s))
        .collect();
    axum::Json(Value::Array(list)).into_response()
}

/// `DELETE /templates/{id}`: a snapshot's removal (other templates are the
/// server's and not removed through the API).
pub async fn delete(server: &Server, tenant: usize, id: &str) -> Response {
    let Some(snapshot) = server.snapshots.owned(tenant, id) else {
        return api_error(
            StatusCode::NOT_FOUND,
            format!("snapshot \"{id}\" doesn't exist or you don't have access to it"),
        );
    };
    server.snapshots.remove(&snapshot.id);
    if let Some(store) = server.registry.store() {
        let _ = store.remove_snapshot(&snapshot.id);
    }
    remove_image(server, &snapshot).await;
    StatusCode::NO_CONTENT.into_response()
}

/// Removes a snapshot's image (one still used by a sandbox started from it
/// is untagged now and goes with that sandbox's container).
pub async fn remove_image(server: &Server, snapshot: &Snapshot) {
    let image = dockhand::session::Snapshot {
        image: snapshot.image.clone(),
        id: String::new(),
    };
    if let Err(e) = server.client.remove_snapshot(&image).await {
        tracing::warn!(snapshot = %snapshot.id, error = %e, "removing a snapshot's image");
    }
}
