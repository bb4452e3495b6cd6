//! The files a template build copies in: the SDKs ask for an upload link
//! per files hash (`GET /templates/{id}/files/{hash}`) and `PUT` a tar of
//! the files to it, without their API key, as they would to a storage
//! bucket. A link is this server's own URL with a single-use token that
//! binds it to one key's template and hash for an hour; the body streams
//! to disk under the server's upload limit.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::extract::Request;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::json;
use tokio::io::AsyncWriteExt;

use super::errors::api_error;
use super::{lock, Server};

/// How long an upload link works.
const LINK_LIFETIME: Duration = Duration::from_secs(3600);
/// What one key's uploads may hold on disk at once, in largest uploads:
/// files wait there for their build, and a client may never start it.
const KEY_UPLOADS: u64 = 4;
/// The most links outstanding, all keys together.
const MAX_LINKS: usize = 10_000;

struct Link {
    template: String,
    hash: String,
    expires: Instant,
}

/// Uploaded build files, by template and files hash.
pub struct Uploads {
    dir: PathBuf,
    /// A directory of the server's own when it has no state directory
    /// (removed with the server).
    _temporary: Option<tempfile::TempDir>,
    links: Mutex<HashMap<String, Link>>,
}

/// A files hash as the SDKs make them (SHA-256, hex).
fn valid_hash(hash: &str) -> bool {
    hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Uploads {
    /// Under `<state>/uploads`, or a temporary directory.
    pub fn new(state_dir: Option<&Path>) -> anyhow::Result<Uploads> {
        use anyhow::Context as _;
        let (dir, temporary) = match state_dir {
            Some(state) => (state.join("uploads"), None),
            None => {
                let temp = tempfile::Builder::new()
                    .prefix("dockhand-serve-uploads-")
                    .tempdir()
                    .context("making a directory for template uploads")?;
                (temp.path().to_path_buf(), Some(temp))
            }
        };
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("making the upload directory {}", dir.display()))?;
        Ok(Uploads {
            dir,
            _temporary: temporary,
            links: Mutex::default(),
        })
    }

    fn file(&self, template: &str, hash: &str) -> PathBuf {
        self.dir.join(template).join(format!("{hash}.tar"))
    }

    /// The uploaded archive of `hash` for `template`, if there is one.
    pub fn path(&self, template: &str, hash: &str) -> Option<PathBuf> {
        let path = self.file(template, hash);
        (valid_hash(hash) && path.is_file()).then_some(path)
    }

    /// The bytes the uploads of these templates hold.
    fn used(&self, templates: &[String]) -> u64 {
        templates
            .iter()
            .filter_map(|t| std::fs::read_dir(self.dir.join(t)).ok())
            .flatten()
            .flatten()
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum()
    }

    /// Removes a template's uploads.
    pub fn forget(&self, template: &str) {
        let dir = self.dir.join(template);
        if dir.exists() {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                tracing::warn!(dir = %dir.display(), error = %e, "removing template uploads");
            }
        }
    }

    fn link(&self, template: &str, hash: &str) -> Option<String> {
        let mut links = lock(&self.links);
        let now = Instant::now();
        links.retain(|_, l| l.expires > now);
        if links.len() >= MAX_LINKS {
            return None;
        }
        let token = format!(
            "{}{}",
            uuid::Uuid::new_v4().simple(),
            uuid::Uuid::new_v4().simple()
        );
        links.insert(
            token.clone(),
            Link {
                template: template.into(),
                hash: hash.into(),
                expires: now + LINK_LIFETIME,
            },
        );
        Some(token)
    }

    /// Spends a link's token: whether it is good for this template and hash.
    fn spend(&self, token: &str, template: &str, hash: &str) -> bool {
        let mut links = lock(&self.links);
        let good = links.get(token).is_some_and(|l| {
            l.template == template && l.hash == hash && l.expires > Instant::now()
        });
        if good {
            links.remove(token);
        }
        good
    }
}

/// `GET /templates/{id}/files/{hash}`: whether the files are here, and if
/// not, where to put them.
pub fn link(server: &Server, tenant: usize, id: &str, hash: &str, headers: &HeaderMap) -> Response {
    let Some(built) = server.built.owned(tenant, id) else {
        return api_error(
            StatusCode::NOT_FOUND,
            format!("template {id} doesn't exist or you don't have access to it"),
        );
    };
    if !valid_hash(hash) {
        return api_error(
            StatusCode::BAD_REQUEST,
            "a files hash is 64 hexadecimal digits",
        );
    }
    let uploads = &server.built.uploads;
    if uploads.path(&built.id, hash).is_some() {
        return (StatusCode::CREATED, axum::Json(json!({"present": true}))).into_response();
    }
    let cap = key_cap(server);
    let used = uploads.used(&server.built.ids_of(tenant));
    if used >= cap {
        return api_error(
            StatusCode::TOO_MANY_REQUESTS,
            format!("this key's uploads hold {used} bytes, the server's limit of {cap}; start their builds or delete their templates first"),
        );
    }
    let Some(token) = uploads.link(&built.id, hash) else {
        return api_error(
            StatusCode::TOO_MANY_REQUESTS,
            "too many upload links are outstanding; try again later",
        );
    };
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let host = header("host").unwrap_or("127.0.0.1");
    let scheme = match header("x-forwarded-proto") {
        Some("https") => "https",
        _ => "http",
    };
    let url = format!(
        "{scheme}://{host}/templates/{}/files/{hash}?token={token}",
        built.id
    );
    // 201, as E2B's API answers (the SDKs read no other).
    (
        StatusCode::CREATED,
        axum::Json(json!({"present": false, "url": url})),
    )
        .into_response()
}

/// `PUT /templates/{id}/files/{hash}?token=…`: the files, as a tar.
pub async fn upload(server: &Server, id: &str, hash: &str, request: Request) -> Response {
    let token = super::query_pairs(request.uri().query().unwrap_or_default())
        .into_iter()
        .find(|(k, _)| k == "token")
        .map(|(_, v)| v)
        .unwrap_or_default();
    let uploads = &server.built.uploads;
    if !valid_hash(hash) || !uploads.spend(&token, id, hash) {
        return api_error(
            StatusCode::FORBIDDEN,
            "this upload link is not valid (wrong, used or expired); ask for a new one",
        );
    }
    // Within the upload limit, and within what the key may still hold.
    let room = server
        .built
        .owner_of(id)
        .map(|tenant| key_cap(server).saturating_sub(uploads.used(&server.built.ids_of(tenant))))
        .unwrap_or(0);
    let limit = (server.limits.max_upload as u64).min(room);
    let target = uploads.file(id, hash);
    let partial = target.with_extension(format!("part-{}", uuid::Uuid::new_v4().simple()));
    match receive(request, &partial, limit).await {
        Ok(()) => match tokio::fs::rename(&partial, &target).await {
            Ok(()) => StatusCode::OK.into_response(),
            Err(e) => {
                let _ = tokio::fs::remove_file(&partial).await;
                api_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("storing the upload: {e}"),
                )
            }
        },
        Err(refusal) => {
            let _ = tokio::fs::remove_file(&partial).await;
            refusal
        }
    }
}

/// What one key's uploads may hold on disk.
fn key_cap(server: &Server) -> u64 {
    server.limits.max_upload as u64 * KEY_UPLOADS
}

/// Streams the body to `path`, at most `limit` bytes.
async fn receive(request: Request, path: &Path, limit: u64) -> Result<(), Response> {
    let failed = |e: std::io::Error| {
        api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("storing the upload: {e}"),
        )
    };
    if let Some(dir) = path.parent() {
        tokio::fs::create_dir_all(dir).await.map_err(failed)?;
    }
    let mut file = tokio::fs::File::create(path).await.map_err(failed)?;
    let mut body = request.into_body().into_data_stream();
    let mut total = 0u64;
    while let Some(chunk) = body.next().await {
        let chunk = chunk
            .map_err(|e| api_error(StatusCode::BAD_REQUEST, format!("reading the upload: {e}")))?;
        total += chunk.len() as u64;
        if total > limit {
            return Err(api_error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the upload is over the server's limit of {limit} bytes (per upload, and for what a key's waiting uploads hold)"),
            ));
        }
        file.write_all(&chunk).await.map_err(failed)?;
    }
    file.flush().await.map_err(failed)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_is_spent_once_and_only_for_its_template_and_hash() {
        let uploads = Uploads::new(None).unwrap();
        let hash = "a".repeat(64);
        let token = uploads.link("tpl-1", &hash).unwrap();
        assert!(!uploads.spend(&token, "tpl-2", &hash));
        assert!(!uploads.spend(&token, "tpl-1", &"b".repeat(64)));
        assert!(!uploads.spend("guess", "tpl-1", &hash));
        assert!(uploads.spend(&token, "tpl-1", &hash));
        assert!(!uploads.spend(&token, "tpl-1", &hash), "spent already");
        assert!(uploads.path("tpl-1", "../../etc/passwd").is_none());
    }
}
