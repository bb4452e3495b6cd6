//! E2B's volumes: `Volume.create(name)`, `Volume.list()`,
//! `Volume.get_info(id)`, `Volume.destroy(id)`, and `volume_mounts` at a
//! sandbox's create. Each is a dockhand [`Volume`] labelled with its key's
//! hash: a key sees, mounts and removes only its own. They outlive
//! sandboxes and the server (they are the daemon's).
//!
//! The volume content API (a volume's files without a sandbox) is
//! `volume_content`'s; the token create and get answer authorizes it.

use std::collections::HashMap;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use dockhand::Volume;
use serde::Deserialize;
use serde_json::{json, Value};

use super::errors::api_error;
use super::Server;

/// The label holding the owning key's hash.
pub const OWNER: &str = "e2b.owner";
/// The label holding the name the client gave.
const NAME: &str = "e2b.name";

/// The dockhand volume name of `tenant`'s volume `name`.
fn docker_name(key_hash: &str, name: &str) -> String {
    format!("e2b-{}-{name}", &key_hash[..12.min(key_hash.len())])
}

/// A client's volume name: a dockhand volume name of at most 40
/// characters (the key's prefix takes the rest).
fn check(name: &str) -> Result<(), String> {
    dockhand::volume::check_name(name)?;
    if name.len() > 40 {
        return Err(format!(
            "`{name}` is longer than a volume name may be here (40)"
        ));
    }
    Ok(())
}

/// `tenant`'s volume whose id (the dockhand name) or name is `id`.
async fn owned(server: &Server, tenant: usize, id: &str) -> dockhand::Result<Option<Volume>> {
    let hash = server.keys.hash_of(tenant);
    let candidates = [id.to_string(), docker_name(&hash, id)];
    for name in candidates {
        if dockhand::volume::check_name(&name).is_err() {
            continue;
        }
        if let Some(v) = Volume::get(&server.client, &name).await? {
            if v.labels.get(OWNER) == Some(&hash) {
                return Ok(Some(v));
            }
        }
    }
    Ok(None)
}

fn info(v: &Volume) -> Value {
    json!({
        "volumeID": v.name,
        "name": v.labels.get(NAME).cloned().unwrap_or_default(),
    })
}

/// The volume's info and the token of its content API (derived from the
/// key and the volume, so it holds across restarts and for this key only).
fn with_token(server: &Server, tenant: usize, v: &Volume) -> Value {
    let mut body = info(v);
    body["token"] = json!(server.keys.volume_token(tenant, &v.name));
    body
}

fn missing(id: &str) -> Response {
    api_error(
        StatusCode::NOT_FOUND,
        format!("volume \"{id}\" doesn't exist or you don't have access to it"),
    )
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NewVolume {
    name: String,
}

/// `POST /volumes`.
pub async fn create(server: &Server, tenant: usize, body: &[u8]) -> Response {
    let request: NewVolume = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return api_error(StatusCode::BAD_REQUEST, format!("bad request body: {e}")),
    };
    if let Err(e) = check(&request.name) {
        return api_error(StatusCode::BAD_REQUEST, e);
    }
    let hash = server.keys.hash_of(tenant);
    let labels = HashMap::from([
        (OWNER.to_string(), hash.clone()),
        (NAME.to_string(), request.name.clone()),
    ]);
    match Volume::create_labelled(&server.client, &docker_name(&hash, &request.name), labels).await
    {
        Ok(v) => (
            StatusCode::CREATED,
            axum::Json(with_token(server, tenant, &v)),
        )
            .into_response(),
        Err(dockhand::Error::InvalidSpec { message, .. }) => {
            api_error(StatusCode::CONFLICT, message)
        }
        Err(e) => super::errors::sdk_failure("volume", &e),
    }
}

/// `GET /volumes`.
pub async fn list(server: &Server, tenant: usize) -> Response {
    let hash = server.keys.hash_of(tenant);
    match Volume::list(&server.client).await {
        Ok(all) => {
            let mine: Vec<Value> = all
                .iter()
                .filter(|v| v.labels.get(OWNER) == Some(&hash))
                .map(info)
                .collect();
            axum::Json(Value::Array(mine)).into_response()
        }
        Err(e) => super::errors::sdk_failure("volume", &e),
    }
}

/// `GET /volumes/{id}`.
pub async fn get(server: &Server, tenant: usize, id: &str) -> Response {
    match owned(server, tenant, id).await {
        Ok(Some(v)) => axum::Json(with_token(server, tenant, &v)).into_response(),
        Ok(None) => missing(id),
        Err(e) => super::errors::sdk_failure("volume", &e),
    }
}

/// `DELETE /volumes/{id}`: 409 while a sandbox mounts it.
pub async fn delete(server: &Server, tenant: usize, id: &str) -> Response {
    let volume = match owned(server, tenant, id).await {
        Ok(Some(v)) => v,
        Ok(None) => return missing(id),
        Err(e) => return super::errors::sdk_failure("volume", &e),
    };
    server.volume_helpers.close(&volume.name).await;
    match volume.remove(&server.client).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(dockhand::Error::InvalidSpec { message, .. }) => {
            api_error(StatusCode::CONFLICT, message)
        }
        Err(e) => super::errors::sdk_failure("volume", &e),
    }
}

/// A create's `volumeMounts`, as `(dockhand volume, path)`: each must be
/// the key's own volume, at an absolute path.
pub async fn mounts(
    server: &Server,
    tenant: usize,
    asked: &Value,
) -> Result<Vec<(String, String)>, String> {
    #[derive(Deserialize)]
    struct Mount {
        name: String,
        path: String,
    }
    let asked: Vec<Mount> = match asked {
        Value::Null => return Ok(Vec::new()),
        other => serde_json::from_value(other.clone()).map_err(|e| format!("volumeMounts: {e}"))?,
    };
    let mut out = Vec::new();
    for m in asked {
        if !m.path.starts_with('/') || m.path == "/" || m.path.contains("..") {
            return Err(format!(
                "volume `{}`: mount it at an absolute path other than /, not `{}`",
                m.name, m.path
            ));
        }
        match owned(server, tenant, &m.name).await {
            Ok(Some(v)) => out.push((v.name, m.path)),
            Ok(None) => {
                return Err(format!(
                    "volume `{}` doesn't exist or you don't have access to it",
                    m.name
                ))
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(out)
}
