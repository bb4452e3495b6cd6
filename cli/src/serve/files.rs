//! envd's filesystem service (`/filesystem.Filesystem/*`) and its `/files`
//! upload and download, on the session agent. Paths resolve against the
//! user's home and must stay under it or `/tmp`, symbolic links included:
//! the agent refuses the rest.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequest, Multipart, Request};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use dockhand::session::{DirEntry, FileInfo, SessionApi};
use dockhand::{Error, FileErrorKind};
use serde::Deserialize;
use serde_json::{json, Value};

use super::config::HOME;
use super::connect::{self, ConnectError};
use super::errors::{api_error, file_error};
use super::query_pairs;
use super::registry::Sandbox;

/// The most entries one `ListDir` returns.
const LIST_LIMIT: usize = 10_000;

/// Go's rendering of a file mode (`-rw-r--r--`, `drwxr-xr-x`, `Lrwxrwxrwx`).
fn permissions(kind: &str, mode: u32) -> String {
    let mut out = String::from(match kind {
        "dir" => "d",
        "link" => "L",
        _ => "-",
    });
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 7;
        out.push(if bits & 4 != 0 { 'r' } else { '-' });
        out.push(if bits & 2 != 0 { 'w' } else { '-' });
        out.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    out
}

fn file_type(kind: &str) -> &'static str {
    match kind {
        "dir" => "FILE_TYPE_DIRECTORY",
        "link" => "FILE_TYPE_SYMLINK",
        "file" => "FILE_TYPE_FILE",
        _ => "FILE_TYPE_UNSPECIFIED",
    }
}

fn owner(id: u32) -> String {
    if id == 0 {
        "root".into()
    } else {
        id.to_string()
    }
}

/// envd's `EntryInfo` (proto3 JSON: 64-bit integers as strings).
fn entry_info(info: &FileInfo) -> Value {
    let modified = chrono::DateTime::from_timestamp(
        info.mtime.trunc() as i64,
        (info.mtime.fract() * 1e9) as u32,
    )
    .unwrap_or_default();
    let mut entry = json!({
        "name": info.name,
        "type": file_type(&info.kind),
        "path": info.path,
        "size": info.size.to_string(),
        "mode": info.mode,
        "permissions": permissions(&info.kind, info.mode),
        "owner": owner(info.uid),
        "group": owner(info.gid),
        "modifiedTime": modified.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true),
        "isSymlink": info.kind == "link",
    });
    if let Some(target) = &info.target {
        entry["symlinkTarget"] = json!(target);
    }
    entry
}

fn listed_entry(dir: &str, e: &DirEntry) -> Value {
    let path = format!("{}/{}", dir.trim_end_matches('/'), e.name);
    json!({
        "name": e.name,
        "type": file_type(&e.kind),
        "path": path,
        "size": e.size.to_string(),
        "isSymlink": e.kind == "link",
    })
}

/// A path as the client gave it, made absolute against the home.
pub fn absolute(path: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else if path.is_empty() {
        HOME.to_string()
    } else {
        format!("{HOME}/{path}")
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PathRequest {
    path: String,
    depth: Option<u32>,
    source: String,
    destination: String,
}

/// One of the unary filesystem methods.
pub async fn unary(sandbox: &Sandbox, method: &str, headers: &HeaderMap, body: &[u8]) -> Response {
    let result = async {
        let request: PathRequest = connect::unary_request(headers, body)?;
        let session = &sandbox.session;
        let path = absolute(&request.path);
        match method {
            "Stat" => {
                let info = session.stat(&path).await.map_err(|e| file_error(&e))?;
                Ok(json!({"entry": entry_info(&info)}))
            }
            "MakeDir" => {
                if !session.make_dir(&path).await.map_err(|e| file_error(&e))? {
                    return Err(ConnectError::new(
                        "already_exists",
                        format!("{path} already exists"),
                    ));
                }
                let info = session.stat(&path).await.map_err(|e| file_error(&e))?;
                Ok(json!({"entry": entry_info(&info)}))
            }
            "Move" => {
                let info = session
                    .rename(&absolute(&request.source), &absolute(&request.destination))
                    .await
                    .map_err(|e| file_error(&e))?;
                Ok(json!({"entry": entry_info(&info)}))
            }
            "Remove" => {
                session.remove(&path).await.map_err(|e| file_error(&e))?;
                Ok(json!({}))
            }
            "ListDir" => {
                let depth = request.depth.unwrap_or(1).clamp(1, 16);
                let entries = list(sandbox, &path, depth).await?;
                Ok(json!({ "entries": entries }))
            }
            _ => Err(ConnectError::new(
                "unimplemented",
                format!("filesystem.{method} is not supported by dockhand serve"),
            )),
        }
    }
    .await;
    connect::unary_response(result)
}

/// Entries under `path` to `depth` levels, breadth first.
async fn list(sandbox: &Sandbox, path: &str, depth: u32) -> Result<Vec<Value>, ConnectError> {
    let info = sandbox
        .session
        .stat(path)
        .await
        .map_err(|e| file_error(&e))?;
    if info.kind != "dir" {
        return Err(ConnectError::new(
            "invalid_argument",
            format!("{path} is not a directory"),
        ));
    }
    let mut out = Vec::new();
    let mut level = vec![info.path.clone()];
    for _ in 0..depth {
        let mut next = Vec::new();
        for dir in level {
            let entries = sandbox
                .session
                .list_dir(&dir)
                .await
                .map_err(|e| file_error(&e))?;
            for e in entries {
                if out.len() >= LIST_LIMIT {
                    return Ok(out);
                }
                if e.kind == "dir" {
                    next.push(format!("{}/{}", dir.trim_end_matches('/'), e.name));
                }
                out.push(listed_entry(&dir, &e));
            }
        }
        level = next;
    }
    Ok(out)
}

fn http_file_error(e: &Error) -> Response {
    let c = file_error(e);
    let status = match c.code {
        "resource_exhausted" => StatusCode::PAYLOAD_TOO_LARGE,
        _ => c.status(),
    };
    api_error(status, c.message)
}

/// The `path` query parameter, if any.
fn query_path(query: Option<&str>) -> Option<String> {
    query_pairs(query?)
        .into_iter()
        .find(|(k, _)| k == "path")
        .map(|(_, v)| v)
}

/// `GET /files?path=`: a file's bytes, at most the server's transfer limit (the
/// session's read limit, set from it, refuses a larger one).
pub async fn download(sandbox: &Sandbox, query: Option<&str>) -> Response {
    let Some(path) = query_path(query) else {
        return api_error(StatusCode::BAD_REQUEST, "the path parameter is missing");
    };
    match streamed(&sandbox.session, &absolute(&path)).await {
        Ok(answer) => answer,
        Err(e) => http_file_error(&e),
    }
}

/// A file of `session` as a response body that streams as the client reads
/// it: the first piece is read before answering, so a missing or too large
/// file gets its status; the rest follows a few pieces ahead of the client
/// (one that stops reading holds the next piece back, not the sandbox, and
/// one that goes away stops the reading). A failure after the first piece
/// cuts the body short, which clients see as a broken transfer.
pub(super) async fn streamed(
    session: &dockhand::session::Session,
    path: &str,
) -> Result<Response, Error> {
    use futures::StreamExt;
    let limit = session.config().read_limit_bytes();
    let mut chunks = Box::pin(session.read_file_stream(path, limit));
    let first = chunks.next().await.transpose()?.unwrap_or_default();
    let body = futures::stream::once(async move { Ok(first) }).chain(chunks);
    Ok((
        [(header::CONTENT_TYPE, "application/octet-stream")],
        Body::from_stream(body),
    )
        .into_response())
}

/// `POST /files`: one file as the body (`?path=`), or several as
/// multipart parts named by their file name. Each streams into the sandbox
/// as it arrives (a MiB at a time), so an upload costs the server little
/// memory whatever its size.
pub async fn upload(sandbox: Arc<Sandbox>, request: Request, limit: usize) -> Response {
    let query = request.uri().query().map(str::to_string);
    let path = query_path(query.as_deref());
    let is_multipart = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("multipart/form-data"));
    let mut written = Vec::new();
    let mut total = 0u64;
    // Set when the client's own body failed (cut short, malformed): the
    // client's mistake, answered 400, not the sandbox's.
    let body_failed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut put = |path: &str| {
        let path = absolute(path);
        let name = path.rsplit('/').next().unwrap_or("").to_string();
        written.push(json!({"name": name, "type": "file", "path": path}));
        path
    };
    if is_multipart {
        let mut parts = match Multipart::from_request(request, &()).await {
            Ok(m) => m,
            Err(e) => return api_error(StatusCode::BAD_REQUEST, e.body_text()),
        };
        let mut first = true;
        loop {
            let field = match parts.next_field().await {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => return api_error(e.status(), e.body_text()),
            };
            let name = field.file_name().map(str::to_string);
            let Some(target) = path.clone().filter(|_| first).or(name) else {
                return api_error(StatusCode::BAD_REQUEST, "a part names no file");
            };
            first = false;
            let target = put(&target);
            let room = (limit as u64).saturating_sub(total);
            match sandbox
                .session
                .write_file_from(&target, watch_body(field, body_failed.clone()), room)
                .await
            {
                Ok(n) => total += n,
                Err(e) => return upload_error(&e, limit, &body_failed),
            }
        }
    } else {
        let Some(path) = path else {
            return api_error(StatusCode::BAD_REQUEST, "the path parameter is missing");
        };
        let target = put(&path);
        let body = request.into_body().into_data_stream();
        if let Err(e) = sandbox
            .session
            .write_file_from(&target, watch_body(body, body_failed.clone()), limit as u64)
            .await
        {
            return upload_error(&e, limit, &body_failed);
        }
    }
    axum::Json(Value::Array(written)).into_response()
}

/// `stream`, noting in `failed` when one of its chunks is an error.
fn watch_body<S, E>(
    stream: S,
    failed: Arc<std::sync::atomic::AtomicBool>,
) -> impl futures::Stream<Item = Result<bytes::Bytes, E>> + Unpin
where
    S: futures::Stream<Item = Result<bytes::Bytes, E>> + Unpin,
{
    use futures::StreamExt;
    stream.inspect(move |chunk| {
        if chunk.is_err() {
            failed.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    })
}

fn upload_error(e: &Error, limit: usize, body_failed: &std::sync::atomic::AtomicBool) -> Response {
    if body_failed.load(std::sync::atomic::Ordering::SeqCst) {
        return api_error(
            StatusCode::BAD_REQUEST,
            format!("the upload's body was cut short or malformed: {e}"),
        );
    }
    match e {
        Error::SessionFile {
            kind: FileErrorKind::TooLarge,
            ..
        } => too_large(limit),
        _ => http_file_error(e),
    }
}

fn too_large(limit: usize) -> Response {
    api_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the upload is over the server's limit of {limit} bytes"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_render_as_go_does() {
        assert_eq!(permissions("file", 0o644), "-rw-r--r--");
        assert_eq!(permissions("dir", 0o755), "drwxr-xr-x");
        assert_eq!(permissions("link", 0o777), "Lrwxrwxrwx");
    }

    #[test]
    fn paths_resolve_against_the_home() {
        assert_eq!(absolute("a/b.txt"), "/home/user/a/b.txt");
        assert_eq!(absolute("/tmp/x"), "/tmp/x");
        assert_eq!(absolute(""), "/home/user");
        assert_eq!(
            query_path(Some("path=%2Ftmp%2Fa%20b&username=user")).as_deref(),
            Some("/tmp/a b")
        );
        assert_eq!(query_path(Some("username=user")), None);
    }

    #[test]
    fn refusals_map_to_envd_codes() {
        let outside = Error::SessionFile {
            path: "/etc/passwd".into(),
            kind: FileErrorKind::OutsideSession,
            message: "outside".into(),
        };
        assert_eq!(file_error(&outside).code, "permission_denied");
        let missing = Error::SessionFile {
            path: "x".into(),
            kind: FileErrorKind::NotFound,
            message: "gone".into(),
        };
        assert_eq!(file_error(&missing).code, "not_found");
    }
}
