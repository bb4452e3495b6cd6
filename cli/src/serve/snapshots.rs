//! E2B's snapshots: `create_snapshot()` commits a sandbox's files to an
//! image (on a cluster with `--kube-pausable`, copies its claim) and, where the daemon can save memory (gVisor with checkpoints),
//! keeps its memory too, as a paused fork (the sandbox runs on);
//! `Sandbox.create(<snapshot id>)` starts new sandboxes from it (forks of
//! that fork: processes, kernels' variables and all), `list_snapshots()` and `delete_snapshot()` manage
//! them. A snapshot belongs to the key that made it; it outlives its
//! sandbox, and with a state directory the server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};

use dockhand::session::PauseMode;

use super::errors::{api_error, not_found, Parts};
use super::registry::Sandbox;
use super::state::Store;
use super::{json_or_default, lock, Server};

/// A sandbox's memory kept for the sandboxes started from its snapshot: a
/// fork of it, paused with its memory; each create forks that again.
#[derive(Clone)]
pub struct Frozen {
    parts: FrozenParts,
    /// One fork of it at a time.
    turn: Arc<tokio::sync::Mutex<()>>,
}

#[derive(Clone)]
enum FrozenParts {
    Kernel(dockhand::kernel::Kernel),
    Session(dockhand::session::Session),
}

impl std::fmt::Debug for Frozen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Frozen")
    }
}

impl FrozenParts {
    /// A sandbox's parts, as its kind has them.
    fn of(sandbox: &Sandbox) -> FrozenParts {
        match &sandbox.kernel {
            Some(kernel) => FrozenParts::Kernel(kernel.clone()),
            None => FrozenParts::Session(sandbox.session.clone()),
        }
    }

    /// One fork of these, with their memory.
    async fn fork(&self) -> dockhand::Result<FrozenParts> {
        Ok(match self {
            FrozenParts::Kernel(k) => {
                FrozenParts::Kernel(one(k.fork(1, PauseMode::Memory).await?)?)
            }
            FrozenParts::Session(s) => {
                FrozenParts::Session(one(s.fork(1, PauseMode::Memory).await?)?)
            }
        })
    }

    async fn pause(&self) -> dockhand::Result<()> {
        match self {
            FrozenParts::Kernel(k) => k.pause(PauseMode::Memory).await.map(drop),
            FrozenParts::Session(s) => s.pause(PauseMode::Memory).await.map(drop),
        }
    }

    async fn close(&self) -> dockhand::Result<()> {
        match self {
            FrozenParts::Kernel(k) => k.close().await,
            FrozenParts::Session(s) => s.close().await.map(drop),
        }
    }

    fn into_parts(self) -> Parts {
        match self {
            FrozenParts::Kernel(k) => (k.session().clone(), Some(k)),
            FrozenParts::Session(s) => (s, None),
        }
    }
}

impl Frozen {
    /// Freezes `sandbox`'s memory (it runs on): `PauseUnsupported` where
    /// the daemon cannot save memory.
    async fn of(sandbox: &Sandbox) -> dockhand::Result<Frozen> {
        let parts = FrozenParts::of(sandbox).fork().await?;
        if let Err(e) = parts.pause().await {
            let _ = parts.close().await;
            return Err(e);
        }
        Ok(Frozen {
            parts,
            turn: Arc::default(),
        })
    }

    /// A new sandbox's parts, going on from the frozen memory.
    pub async fn fork(&self) -> dockhand::Result<Parts> {
        let _turn = self.turn.lock().await;
        Ok(self.parts.fork().await?.into_parts())
    }

    /// Removes the frozen fork (its container and checkpoint).
    pub async fn close(&self) {
        if let Err(e) = self.parts.close().await {
            tracing::warn!(error = %e, "removing a memory snapshot");
        }
    }
}

/// The one fork asked for.
fn one<T>(mut forks: Vec<T>) -> dockhand::Result<T> {
    forks
        .pop()
        .ok_or_else(|| dockhand::Error::SessionUnavailable {
            reason: "the fork made no sandbox".into(),
        })
}

/// One snapshot.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// What clients name it by (also its template id).
    pub id: String,
    pub tenant: usize,
    pub key_hash: String,
    /// The template its sandbox came from: what sandboxes from it are.
    pub template: String,
    /// Its image on the daemon (on a cluster, its source's image).
    pub image: String,
    /// On a cluster, the claim holding its files (see `dockhand::session::Snapshot::files`).
    pub files: Option<String>,
    pub names: Vec<String>,
    pub source: String,
    pub created: DateTime<Utc>,
    /// Its memory, while this server runs (a restarted server starts
    /// sandboxes from its files).
    pub frozen: Option<Frozen>,
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

    /// Removes every snapshot's memory (a shutdown: the next server has
    /// their files).
    pub async fn thaw_all(&self) {
        let frozen: Vec<Frozen> = lock(&self.by_id)
            .values()
            .filter_map(|s| s.frozen.clone())
            .collect();
        for f in frozen {
            f.close().await;
        }
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
    // Memory where the daemon can save it (E2B's default, `full`); asked
    // for explicitly where it cannot, refused with the reason.
    let frozen = match request.memory {
        Some(false) => None,
        asked => match Frozen::of(&sandbox).await {
            Ok(frozen) => Some(frozen),
            Err(dockhand::Error::PauseUnsupported { .. }) if asked.is_none() => None,
            Err(e @ dockhand::Error::PauseUnsupported { .. }) => {
                return api_error(StatusCode::NOT_IMPLEMENTED, e.to_string())
            }
            Err(e) => {
                return super::errors::sdk_failure(
                    format!("snapshotting sandbox {id}'s memory"),
                    &e,
                )
            }
        },
    };
    let image = match sandbox.session.snapshot().await {
        Ok(image) => image,
        Err(e) => {
            if let Some(frozen) = &frozen {
                frozen.close().await;
            }
            return super::errors::sdk_failure(format!("snapshotting sandbox {id}"), &e);
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
        files: image.files,
        source: sandbox.id.clone(),
        created: Utc::now(),
        frozen,
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
    if let Some(frozen) = &snapshot.frozen {
        frozen.close().await;
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
        files: snapshot.files.clone(),
    };
    if let Err(e) = server.client.remove_snapshot(&image).await {
        tracing::warn!(snapshot = %snapshot.id, error = %e, "removing a snapshot's image");
    }
}
/// Snapshots in the state directory.
impl Store {
    /// Stores a snapshot.
    pub fn put_snapshot(&self, s: &Snapshot) -> anyhow::Result<()> {
        self.lock().execute(
            "INSERT OR REPLACE INTO snapshots (id, key_hash, template, image, names, source, created, files)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            rusqlite::params![
                s.id,
                s.key_hash,
                s.template,
                s.image,
                serde_json::to_string(&s.names).unwrap_or_default(),
                s.source,
                s.created.to_rfc3339(),
                s.files
            ],
        )?;
        Ok(())
    }

    /// Forgets a snapshot.
    pub fn remove_snapshot(&self, id: &str) -> anyhow::Result<()> {
        self.lock()
            .execute("DELETE FROM snapshots WHERE id = ?1", rusqlite::params![id])?;
        Ok(())
    }

    /// Every stored snapshot, as `(key hash, snapshot with no tenant yet)`.
    pub fn snapshots(&self) -> anyhow::Result<Vec<Snapshot>> {
        let db = self.lock();
        let mut query = db.prepare(
            "SELECT id, key_hash, template, image, names, source, created, files FROM snapshots",
        )?;
        let rows = query.query_map([], |r| {
            let names: String = r.get(4)?;
            let created: String = r.get(6)?;
            Ok(Snapshot {
                id: r.get(0)?,
                tenant: usize::MAX,
                key_hash: r.get(1)?,
                template: r.get(2)?,
                image: r.get(3)?,
                files: r.get(7)?,
                names: serde_json::from_str(&names).unwrap_or_default(),
                source: r.get(5)?,
                created: DateTime::parse_from_rfc3339(&created)
                    .map(|t| t.with_timezone(&Utc))
                    .unwrap_or_else(|_| Utc::now()),
                frozen: None,
            })
        })?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .with_context(|| format!("reading {}", self.path().display()))
    }
}
