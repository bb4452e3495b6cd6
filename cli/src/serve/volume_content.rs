//! E2B's volume content API: a volume's files read and written without a
//! sandbox (`vol.list`, `make_dir`, `exists`, `get_info`,
//! `update_metadata`, `read_file`, `write_file`, `remove`), at
//! `/volumecontent/{id}/...` with the volume's token as the bearer. The
//! files are reached through a helper session of the server's own that
//! mounts the volume at `/volume`: started on the first call, closed after
//! a quiet half minute or when the volume is destroyed. Paths are the
//! volume's: `..` is refused, and whatever a symlink in the volume names
//! is inside the throwaway helper, not the host.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use dockhand::session::{ExecOptions, Session, SessionApi as _, SessionConfig};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::OnceCell;

use super::errors::api_error;
use super::{lock, Server};

/// Where helpers mount the volume.
const MOUNT: &str = "/volume";
/// A helper this long unused is closed.
const IDLE: Duration = Duration::from_secs(30);
/// The uid and gid files in volumes have (the sandboxes' user).
const OWNER_ID: u32 = 65534;

struct Helper {
    session: OnceCell<Session>,
    used: std::sync::Mutex<Instant>,
}

/// The helper sessions, by volume.
#[derive(Default)]
pub struct Helpers {
    by_volume: std::sync::Mutex<HashMap<String, Arc<Helper>>>,
}

impl Helpers {
    async fn session(&self, server: &Server, volume: &str) -> dockhand::Result<Session> {
        let helper = lock(&self.by_volume)
            .entry(volume.to_string())
            .or_insert_with(|| {
                Arc::new(Helper {
                    session: OnceCell::new(),
                    used: std::sync::Mutex::new(Instant::now()),
                })
            })
            .clone();
        *lock(&helper.used) = Instant::now();
        let session = helper
            .session
            .get_or_try_init(|| async {
                let config = SessionConfig::new()
                    .image(dockhand::ImageSpec::default().trust_host_certificates())
                    .volume(volume, MOUNT)
                    .read_limit(server.limits.max_upload as u64);
                let session = server.client.session(config);
                session.start().await?;
                Ok::<_, dockhand::Error>(session)
            })
            .await;
        match session {
            Ok(s) => Ok(s.clone()),
            Err(e) => {
                lock(&self.by_volume).remove(volume);
                Err(e)
            }
        }
    }

    /// Closes the helper of `volume` (before it is destroyed).
    pub async fn close(&self, volume: &str) {
        let helper = lock(&self.by_volume).remove(volume);
        if let Some(session) = helper.as_ref().and_then(|h| h.session.get()) {
            session.close().await.ok();
        }
    }

    /// Closes helpers unused for a while; every one when `all`.
    pub async fn close_idle(&self, all: bool) {
        let idle: Vec<Arc<Helper>> = {
            let mut map = lock(&self.by_volume);
            let names: Vec<String> = map
                .iter()
                .filter(|(_, h)| all || lock(&h.used).elapsed() > IDLE)
                .map(|(n, _)| n.clone())
                .collect();
            names.iter().filter_map(|n| map.remove(n)).collect()
        };
        for helper in idle {
            if let Some(session) = helper.session.get() {
                session.close().await.ok();
            }
        }
    }
}

/// Closes idle helpers, forever.
pub async fn close_idle_forever(server: Arc<Server>) {
    loop {
        tokio::time::sleep(IDLE / 3).await;
        server.volume_helpers.close_idle(false).await;
    }
}

/// The volume a call names, if its bearer token is that volume's.
async fn authorized(server: &Server, id: &str, headers: &HeaderMap) -> Result<String, Response> {
    let missing = || {
        api_error(
            StatusCode::NOT_FOUND,
            format!("volume \"{id}\" doesn't exist or you don't have access to it"),
        )
    };
    let presented = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if presented.is_empty() {
        return Err(api_error(
            StatusCode::UNAUTHORIZED,
            "the volume's token is missing (Authorization: Bearer <token from Volume.create or Volume.connect>)",
        ));
    }
    if dockhand::volume::check_name(id).is_err() {
        return Err(missing());
    }
    let volume = dockhand::Volume::get(&server.client, id)
        .await
        .map_err(|e| api_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .ok_or_else(missing)?;
    let tenant = volume
        .labels
        .get(super::volumes::OWNER)
        .and_then(|hash| server.keys.tenant_of_hash(hash))
        .ok_or_else(missing)?;
    let expected = server.keys.volume_token(tenant, &volume.name);
    if !super::config::same_secret(presented, &expected) {
        return Err(missing());
    }
    Ok(volume.name)
}

/// The path inside the helper of a volume path; `..` is refused.
fn inside(path: &str) -> Result<String, Response> {
    if path.split('/').any(|p| p == "..") || path.contains('\0') {
        return Err(api_error(
            StatusCode::BAD_REQUEST,
            format!("`{path}` climbs out of the volume"),
        ));
    }
    let rest = path.trim_matches('/');
    Ok(if rest.is_empty() {
        MOUNT.to_string()
    } else {
        format!("{MOUNT}/{rest}")
    })
}

fn quoted(path: &str) -> String {
    shlex::try_quote(path)
        .map(|q| q.into_owned())
        .unwrap_or_default()
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Query {
    path: String,
    depth: Option<u32>,
    uid: Option<u32>,
    gid: Option<u32>,
    mode: Option<u32>,
    force: Option<bool>,
}

fn query_of(uri: &axum::http::Uri) -> Result<Query, Response> {
    axum::extract::Query::<Query>::try_from_uri(uri)
        .map(|q| q.0)
        .map_err(|e| api_error(StatusCode::BAD_REQUEST, format!("bad query: {e}")))
}

/// Refuses owners other than the sandboxes' user: a file a sandbox could
/// not write would be of no use to it.
fn check_owner(uid: Option<u32>, gid: Option<u32>) -> Result<(), Response> {
    if uid.is_some_and(|u| u != OWNER_ID) || gid.is_some_and(|g| g != OWNER_ID) {
        return Err(api_error(
            StatusCode::BAD_REQUEST,
            format!("files in volumes here belong to the sandboxes' user ({OWNER_ID}:{OWNER_ID})"),
        ));
    }
    Ok(())
}

/// One `find -printf` record per entry: type, size, mode, uid, gid,
/// times, link target, then the path (last: it may hold tabs).
const FORMAT: &str = r"%y\t%s\t%m\t%U\t%G\t%A@\t%T@\t%C@\t%l\t%p\0";

fn time(field: &str) -> String {
    let seconds = field.parse::<f64>().unwrap_or(0.0);
    DateTime::<Utc>::from_timestamp(seconds as i64, ((seconds.fract()) * 1e9) as u32)
        .unwrap_or_default()
        .to_rfc3339()
}

fn entries(output: &str) -> Vec<Value> {
    output
        .split('\0')
        .filter(|r| !r.is_empty())
        .filter_map(|record| {
            let f: Vec<&str> = record.splitn(10, '\t').collect();
            let [kind, size, mode, uid, gid, atime, mtime, ctime, target, path] = f[..] else {
                return None;
            };
            let path = path.strip_prefix(MOUNT).unwrap_or(path);
            let path = if path.is_empty() { "/" } else { path };
            let mut entry = json!({
                "name": path.rsplit('/').next().unwrap_or_default(),
                "type": match kind { "d" => "directory", "f" => "file", "l" => "symlink", _ => "unknown" },
                "path": path,
                "size": size.parse::<u64>().unwrap_or(0),
                "mode": u32::from_str_radix(mode, 8).unwrap_or(0),
                "uid": uid.parse::<u32>().unwrap_or(0),
                "gid": gid.parse::<u32>().unwrap_or(0),
                "atime": time(atime),
                "mtime": time(mtime),
                "ctime": time(ctime),
            });
            if kind == "l" {
                entry["target"] = json!(target);
            }
            Some(entry)
        })
        .collect()
}

async fn run(session: &Session, command: &str) -> Result<String, Response> {
    let r = session
        .exec_with(command, ExecOptions::new().timeout(Duration::from_secs(30)))
        .await
        .map_err(|e| api_error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    if r.success() {
        return Ok(r.stdout);
    }
    let status = if r.stderr.contains("No such file") {
        StatusCode::NOT_FOUND
    } else if r.stderr.contains("File exists") || r.stderr.contains("exists already") {
        StatusCode::CONFLICT
    } else {
        StatusCode::BAD_REQUEST
    };
    Err(api_error(status, r.stderr.trim().replace(MOUNT, "")))
}

async fn stat(session: &Session, path: &str, depth: Option<u32>) -> Result<Vec<Value>, Response> {
    let range = match depth {
        None => "-maxdepth 0".to_string(),
        Some(d) => format!("-mindepth 1 -maxdepth {}", d.clamp(1, 32)),
    };
    let out = run(
        session,
        &format!("find {} {range} -printf '{FORMAT}'", quoted(path)),
    )
    .await?;
    Ok(entries(&out))
}

async fn one(session: &Session, path: &str) -> Result<Value, Response> {
    stat(session, path, None)
        .await?
        .into_iter()
        .next()
        .ok_or_else(|| api_error(StatusCode::NOT_FOUND, "the path is gone"))
}

/// Every `/volumecontent/{id}/{what}` call.
pub async fn handle(server: &Server, id: &str, what: &str, request: Request) -> Response {
    match answer(server, id, what, request).await {
        Ok(r) | Err(r) => r,
    }
}

async fn answer(
    server: &Server,
    id: &str,
    what: &str,
    request: Request,
) -> Result<Response, Response> {
    let volume = authorized(server, id, request.headers()).await?;
    let query = query_of(request.uri())?;
    let path = inside(&query.path)?;
    let session = server
        .volume_helpers
        .session(server, &volume)
        .await
        .map_err(|e| {
            // A volume another sandbox writes, where its claim takes one
            // writer (a cluster's ReadWriteOnce), is a conflict of the
            // caller's to resolve, not the server's failure.
            let status = match e {
                dockhand::Error::InvalidSpec { .. } => StatusCode::CONFLICT,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            api_error(status, format!("opening the volume: {e}"))
        })?;
    let method = request.method().clone();
    use axum::http::Method;
    match (what, method) {
        ("dir", Method::GET) => {
            let depth = query.depth.unwrap_or(1);
            Ok(axum::Json(Value::Array(stat(&session, &path, Some(depth)).await?)).into_response())
        }
        ("dir", Method::POST) => {
            check_owner(query.uid, query.gid)?;
            let parents = if query.force == Some(true) { "-p " } else { "" };
            run(&session, &format!("mkdir {parents}{}", quoted(&path))).await?;
            if let Some(mode) = query.mode {
                run(&session, &format!("chmod {mode:o} {}", quoted(&path))).await?;
            }
            Ok((StatusCode::CREATED, axum::Json(one(&session, &path).await?)).into_response())
        }
        ("file", Method::GET) => super::files::streamed(&session, &path)
            .await
            .map_err(|e| file_error(&e)),
        ("file", Method::PUT) => {
            check_owner(query.uid, query.gid)?;
            if query.force != Some(true) && one(&session, &path).await.is_ok() {
                return Err(api_error(
                    StatusCode::CONFLICT,
                    format!(
                        "{} exists already (write with force=True to replace it)",
                        query.path
                    ),
                ));
            }
            let body = request.into_body().into_data_stream();
            session
                .write_file_from(&path, body, server.limits.max_upload as u64)
                .await
                .map_err(|e| file_error(&e))?;
            if let Some(mode) = query.mode {
                run(&session, &format!("chmod {mode:o} {}", quoted(&path))).await?;
            }
            Ok((StatusCode::CREATED, axum::Json(one(&session, &path).await?)).into_response())
        }
        ("path", Method::GET) => Ok(axum::Json(one(&session, &path).await?).into_response()),
        ("path", Method::PATCH) => {
            #[derive(Deserialize, Default)]
            #[serde(default)]
            struct Change {
                uid: Option<u32>,
                gid: Option<u32>,
                mode: Option<u32>,
            }
            let body = axum::body::to_bytes(request.into_body(), 64 << 10)
                .await
                .map_err(|e| api_error(StatusCode::BAD_REQUEST, e.to_string()))?;
            let change: Change =
                super::json_or_default(&body).map_err(|e| api_error(StatusCode::BAD_REQUEST, e))?;
            check_owner(change.uid, change.gid)?;
            one(&session, &path).await?;
            if let Some(mode) = change.mode {
                run(&session, &format!("chmod {mode:o} {}", quoted(&path))).await?;
            }
            Ok(axum::Json(one(&session, &path).await?).into_response())
        }
        ("path", Method::DELETE) => {
            if path == MOUNT {
                return Err(api_error(
                    StatusCode::BAD_REQUEST,
                    "the volume's root is not removed; destroy the volume",
                ));
            }
            one(&session, &path).await?;
            session.remove(&path).await.map_err(|e| file_error(&e))?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        (what, method) => Err(api_error(
            StatusCode::METHOD_NOT_ALLOWED,
            format!("{method} /volumecontent/{{id}}/{what} is not part of the volume API"),
        )),
    }
}

fn file_error(e: &dockhand::Error) -> Response {
    use dockhand::FileErrorKind;
    let status = match e {
        dockhand::Error::SessionFile { kind, .. } => match kind {
            FileErrorKind::NotFound => StatusCode::NOT_FOUND,
            FileErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            _ => StatusCode::BAD_REQUEST,
        },
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    api_error(status, e.to_string().replace(MOUNT, ""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_in_the_volume() {
        assert_eq!(inside("").unwrap(), "/volume");
        assert_eq!(inside("/a/b.txt").unwrap(), "/volume/a/b.txt");
        assert_eq!(inside("a/").unwrap(), "/volume/a");
        assert!(inside("../etc").is_err());
        assert!(inside("/a/../../etc").is_err());
    }

    #[test]
    fn find_records_become_entries() {
        let out =
            "f\t5\t644\t65534\t65534\t1700000000.5\t1700000000\t1700000000\t\t/volume/a\tb.txt\0\
                   l\t3\t777\t0\t0\t1\t1\t1\t/etc\t/volume/link\0";
        let e = entries(out);
        assert_eq!(e[0]["path"], "/a\tb.txt");
        assert_eq!(e[0]["type"], "file");
        assert_eq!(e[0]["mode"], 0o644);
        assert_eq!(e[1]["type"], "symlink");
        assert_eq!(e[1]["target"], "/etc");
    }
}
