//! E2B's template builds: the SDKs' `Template.build()` asks for a build
//! (`POST /v3/templates`), uploads the files its `copy` steps name (through
//! links this server hands out, see `template_files`), starts the build
//! (`POST /v2/templates/{id}/builds/{build}`) and polls its status and log.
//! The build is a dockhand [`ImageSpec`](dockhand::ImageSpec) on the daemon
//! (see `template_build`); `Sandbox.create("<name>")` then starts it. A
//! template belongs to the key that built it: other keys neither see nor
//! start it. With a state directory it outlives the server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::errors::api_error;
use super::state::Store;
use super::template_files::Uploads;
use super::template_spec::Refusal;
use super::{json_or_default, lock, Server};

/// The most templates one key may have.
const MAX_TEMPLATES_PER_KEY: usize = 100;
/// The most builds one key may have waiting or running.
const MAX_BUILDS_PER_KEY: usize = 2;
/// A build's log keeps this many entries; later ones replace the middle.
const MAX_LOG_ENTRIES: usize = 5_000;
/// The most entries one status call returns (as E2B's API).
const STATUS_PAGE: usize = 100;

/// A template a key built.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Built {
    pub id: String,
    #[serde(skip, default = "no_tenant")]
    pub tenant: usize,
    pub key_hash: String,
    pub name: String,
    pub tags: Vec<String>,
    /// The server's template its sandboxes start as (a session or a kernel).
    pub base: String,
    /// The image of its last good build; none before one.
    pub image: Option<String>,
    pub start_cmd: Option<String>,
    pub ready_cmd: Option<String>,
    pub cpus: u32,
    pub memory_mb: u32,
    pub created: DateTime<Utc>,
    pub updated: DateTime<Utc>,
    /// The build that made `image` (or the latest asked for).
    pub build_id: String,
    pub builds: u32,
}

fn no_tenant() -> usize {
    usize::MAX
}

impl Built {
    fn names(&self) -> Vec<String> {
        vec![self.name.clone()]
    }

    /// Whether clients name it by `id`: its id, its name, or `name:tag`.
    fn is_named(&self, id: &str) -> bool {
        if id == self.id || id == self.name {
            return true;
        }
        id.split_once(':')
            .is_some_and(|(name, tag)| name == self.name && self.tags.iter().any(|t| t == tag))
    }
}

/// Where a build is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Waiting,
    Building,
    Ready,
    Error,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Waiting => "waiting",
            Status::Building => "building",
            Status::Ready => "ready",
            Status::Error => "error",
        }
    }
}

/// One line of a build's log.
#[derive(Debug, Clone)]
struct Entry {
    at: DateTime<Utc>,
    level: &'static str,
    message: String,
}

struct JobState {
    status: Status,
    log: Vec<Entry>,
    /// Entries dropped from the middle of a long log.
    dropped: usize,
    reason: Option<Refusal>,
}

/// One build and its log.
pub struct Job {
    pub id: String,
    pub template: String,
    pub tenant: usize,
    state: Mutex<JobState>,
}

impl Job {
    /// Appends a log line (the middle of a very long log goes, so a
    /// build that prints forever holds bounded memory).
    pub fn log(&self, level: &'static str, message: impl Into<String>) {
        let mut state = lock(&self.state);
        if state.log.len() >= MAX_LOG_ENTRIES {
            let middle = MAX_LOG_ENTRIES / 2;
            state.log.remove(middle);
            state.dropped += 1;
        }
        state.log.push(Entry {
            at: Utc::now(),
            level,
            message: message.into(),
        });
    }

    pub fn set(&self, status: Status) {
        lock(&self.state).status = status;
    }

    pub fn status(&self) -> Status {
        lock(&self.state).status
    }

    pub fn fail(&self, reason: Refusal) {
        self.log("error", reason.message.clone());
        let mut state = lock(&self.state);
        state.status = Status::Error;
        state.reason = Some(reason);
    }
}

/// The templates keys built, their builds and uploads.
pub struct Templates {
    by_id: Mutex<HashMap<String, Built>>,
    jobs: Mutex<HashMap<String, Arc<Job>>>,
    pub uploads: Uploads,
    /// Builds run a few at a time: each costs the host's CPU and disk.
    pub slots: tokio::sync::Semaphore,
}

impl Templates {
    pub fn new(uploads: Uploads, concurrent_builds: usize) -> Templates {
        Templates {
            by_id: Mutex::default(),
            jobs: Mutex::default(),
            uploads,
            slots: tokio::sync::Semaphore::new(concurrent_builds.max(1)),
        }
    }

    /// `tenant`'s template by id, name or `name:tag`.
    pub fn owned(&self, tenant: usize, id: &str) -> Option<Built> {
        lock(&self.by_id)
            .values()
            .find(|t| t.tenant == tenant && t.is_named(id))
            .cloned()
    }

    /// The ids of `tenant`'s templates.
    pub fn ids_of(&self, tenant: usize) -> Vec<String> {
        lock(&self.by_id)
            .values()
            .filter(|t| t.tenant == tenant)
            .map(|t| t.id.clone())
            .collect()
    }

    /// The tenant whose template `id` is.
    pub fn owner_of(&self, id: &str) -> Option<usize> {
        lock(&self.by_id).get(id).map(|t| t.tenant)
    }

    /// A template as restored from the state directory.
    pub fn insert(&self, built: Built) {
        lock(&self.by_id).insert(built.id.clone(), built);
    }

    /// Records a good build; returns the image it replaced, if no other
    /// template uses that one.
    pub fn finished(&self, server: &Server, mut built: Built) -> Option<String> {
        let old = {
            let mut all = lock(&self.by_id);
            let old = all.get(&built.id).and_then(|t| t.image.clone());
            if let Some(current) = all.get(&built.id) {
                built.builds = current.builds + 1;
            }
            all.insert(built.id.clone(), built.clone());
            old.filter(|old| Some(old) != built.image.as_ref())
                .filter(|old| !all.values().any(|t| t.image.as_ref() == Some(old)))
        };
        persist(server, &built);
        old
    }

    pub fn job(&self, id: &str) -> Option<Arc<Job>> {
        lock(&self.jobs).get(id).cloned()
    }

    /// Whether another build of `template` than `except` waits or runs.
    pub fn building(&self, template: &str, except: &str) -> bool {
        lock(&self.jobs).values().any(|j| {
            j.template == template
                && j.id != except
                && matches!(j.status(), Status::Waiting | Status::Building)
        })
    }

    /// Every template (a shutdown that removes them).
    pub fn take_all(&self) -> Vec<Built> {
        lock(&self.by_id).drain().map(|(_, t)| t).collect()
    }

    fn remove(&self, id: &str) -> Option<(Built, bool)> {
        let mut all = lock(&self.by_id);
        let gone = all.remove(id)?;
        let shared = all
            .values()
            .any(|t| t.image.is_some() && t.image == gone.image);
        Some((gone, shared))
    }
}

fn persist(server: &Server, built: &Built) {
    if let Some(store) = server.registry.store() {
        if let Err(e) = store.put_template(built) {
            tracing::error!(template = %built.id, error = %e, "writing the state database");
        }
    }
}

/// A template name: what `Sandbox.create` and `from_template` name it by.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct BuildAsk {
    name: Option<String>,
    alias: Option<String>,
    tags: Vec<String>,
    cpu_count: Option<u32>,
    #[serde(rename = "memoryMB")]
    memory_mb: Option<u32>,
}

/// `POST /v3/templates`: a template (new, or the key's of that name) and
/// a build of it, waiting for its start.
pub fn request(server: &Server, tenant: usize, body: &[u8]) -> Response {
    if !server.limits.template_builds {
        return api_error(
            StatusCode::FORBIDDEN,
            "template builds are turned off on this server (--no-template-builds)",
        );
    }
    let ask: BuildAsk = match json_or_default(body) {
        Ok(a) => a,
        Err(e) => return api_error(StatusCode::BAD_REQUEST, e),
    };
    let Some(full) = ask.name.or(ask.alias) else {
        return api_error(StatusCode::BAD_REQUEST, "a template build needs a name");
    };
    let (name, tag) = match full.split_once(':') {
        Some((name, tag)) => (name.to_string(), Some(tag.to_string())),
        None => (full.clone(), None),
    };
    let mut tags: Vec<String> = tag.into_iter().chain(ask.tags).collect();
    if tags.is_empty() {
        tags.push("default".into());
    }
    if !valid_name(&name) || !tags.iter().all(|t| valid_name(t)) {
        return api_error(
            StatusCode::BAD_REQUEST,
            "a template name and each tag is 1 to 64 letters, digits, `-`, `_` or `.`",
        );
    }
    if server.templates.contains_key(&name) {
        return api_error(
            StatusCode::CONFLICT,
            format!("`{name}` is one of the server's own templates; build under another name"),
        );
    }
    let templates = &server.built;
    let pending = lock(&templates.jobs)
        .values()
        .filter(|j| j.tenant == tenant && matches!(j.status(), Status::Waiting | Status::Building))
        .count();
    if pending >= MAX_BUILDS_PER_KEY {
        return api_error(
            StatusCode::TOO_MANY_REQUESTS,
            format!("this key has {pending} builds waiting or running, the server's limit; wait for one to end"),
        );
    }
    let build_id = uuid::Uuid::new_v4().to_string();
    let now = Utc::now();
    let built = {
        let mut all = lock(&templates.by_id);
        let existing = all
            .values()
            .find(|t| t.tenant == tenant && t.name == name)
            .cloned();
        match existing {
            Some(mut t) => {
                for tag in &tags {
                    if !t.tags.contains(tag) {
                        t.tags.push(tag.clone());
                    }
                }
                all.insert(t.id.clone(), t.clone());
                t
            }
            None => {
                if all.values().filter(|t| t.tenant == tenant).count() >= MAX_TEMPLATES_PER_KEY {
                    return api_error(
                        StatusCode::TOO_MANY_REQUESTS,
                        format!("this key has {MAX_TEMPLATES_PER_KEY} templates, the server's limit; delete some first"),
                    );
                }
                let t = Built {
                    id: format!("tpl-{}", &uuid::Uuid::new_v4().simple().to_string()[..16]),
                    tenant,
                    key_hash: server.keys.hash_of(tenant),
                    name: name.clone(),
                    tags: tags.clone(),
                    base: super::config::BASE.into(),
                    image: None,
                    start_cmd: None,
                    ready_cmd: None,
                    cpus: ask.cpu_count.unwrap_or(2).clamp(1, 64),
                    memory_mb: ask.memory_mb.unwrap_or(1024).clamp(128, 1 << 20),
                    created: now,
                    updated: now,
                    build_id: build_id.clone(),
                    builds: 0,
                };
                all.insert(t.id.clone(), t.clone());
                t
            }
        }
    };
    persist(server, &built);
    lock(&templates.jobs).retain(|_, j| {
        // Finished builds of this template older than the new one go.
        !(j.template == built.id && matches!(j.status(), Status::Ready | Status::Error))
    });
    let job = Arc::new(Job {
        id: build_id.clone(),
        template: built.id.clone(),
        tenant,
        state: Mutex::new(JobState {
            status: Status::Waiting,
            log: Vec::new(),
            dropped: 0,
            reason: None,
        }),
    });
    lock(&templates.jobs).insert(build_id.clone(), job);
    (
        StatusCode::ACCEPTED,
        axum::Json(json!({
            "templateID": built.id,
            "buildID": build_id,
            "public": false,
            "names": built.names(),
            "tags": tags,
            "aliases": built.names(),
        })),
    )
        .into_response()
}

/// The key's build `build` of template `id`, or the answer saying it is not.
pub fn owned_job(
    server: &Server,
    tenant: usize,
    id: &str,
    build: &str,
) -> Result<Arc<Job>, Response> {
    server
        .built
        .job(build)
        .filter(|j| j.tenant == tenant && j.template == id)
        .ok_or_else(|| {
            api_error(
                StatusCode::NOT_FOUND,
                format!(
                    "build {build} of template {id} doesn't exist or you don't have access to it"
                ),
            )
        })
}

/// What a build starts from: its job, what it was asked, its template.
pub type Started = (Arc<Job>, super::template_spec::BuildRequest, Built);

/// `POST /v2/templates/{id}/builds/{build}`: checks and queues the build;
/// the caller runs it (`template_build::run`).
pub fn start(
    server: &Server,
    tenant: usize,
    id: &str,
    build: &str,
    body: &[u8],
) -> Result<Started, Response> {
    let job = owned_job(server, tenant, id, build)?;
    let request: super::template_spec::BuildRequest = serde_json::from_slice(body)
        .map_err(|e| api_error(StatusCode::BAD_REQUEST, format!("bad build request: {e}")))?;
    let built = server
        .built
        .owned(tenant, id)
        .ok_or_else(|| api_error(StatusCode::NOT_FOUND, format!("template {id} was deleted")))?;
    {
        let mut state = lock(&job.state);
        if state.status != Status::Waiting || !state.log.is_empty() {
            return Err(api_error(
                StatusCode::CONFLICT,
                format!("build {build} was started already"),
            ));
        }
        state.log.push(Entry {
            at: Utc::now(),
            level: "info",
            message: "Build queued".into(),
        });
    }
    Ok((job, request, built))
}

/// `GET /templates/{id}/builds/{build}/status`: the status and the log
/// from `logsOffset`.
pub fn status(server: &Server, tenant: usize, id: &str, build: &str, raw_query: &str) -> Response {
    let job = match owned_job(server, tenant, id, build) {
        Ok(j) => j,
        Err(r) => return r,
    };
    let pairs = super::query_pairs(raw_query);
    let number = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.parse::<usize>().ok())
    };
    let offset = number("logsOffset").unwrap_or(0);
    let state = lock(&job.state);
    let entry = |e: &Entry| {
        json!({
            "timestamp": e.at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            "level": e.level,
            "message": e.message,
        })
    };
    // Offsets count every entry ever logged; those dropped from the middle
    // (after the first half of the kept ones) read as gone.
    let middle = MAX_LOG_ENTRIES / 2;
    let first = if offset <= middle {
        offset
    } else {
        offset.saturating_sub(state.dropped).max(middle)
    };
    let page = number("limit").unwrap_or(STATUS_PAGE).min(STATUS_PAGE);
    let entries: Vec<Value> = state.log.iter().skip(first).take(page).map(entry).collect();
    let mut body = json!({
        "templateID": job.template,
        "buildID": job.id,
        "status": state.status.as_str(),
        "logEntries": entries,
        "logs": [],
    });
    if let Some(reason) = &state.reason {
        let tail: Vec<Value> = state.log.iter().rev().take(20).rev().map(entry).collect();
        let mut r = json!({"message": reason.message, "logEntries": tail});
        if let Some(step) = &reason.step {
            r["step"] = json!(step);
        }
        body["reason"] = r;
    }
    axum::Json(body).into_response()
}

/// `GET /templates/aliases/{alias}`: the key's template of that name, or
/// one of the server's (public); another key's reads as missing.
pub fn alias(server: &Server, tenant: usize, alias: &str) -> Response {
    if let Some(t) = server.built.owned(tenant, alias) {
        return axum::Json(json!({"templateID": t.id, "public": false})).into_response();
    }
    if server.templates.contains_key(alias) {
        return axum::Json(json!({"templateID": alias, "public": true})).into_response();
    }
    api_error(
        StatusCode::NOT_FOUND,
        format!("template \"{alias}\" doesn't exist or you don't have access to it"),
    )
}

/// `GET /templates`: the key's templates.
pub fn list(server: &Server, tenant: usize) -> Response {
    let mut mine: Vec<Built> = lock(&server.built.by_id)
        .values()
        .filter(|t| t.tenant == tenant)
        .cloned()
        .collect();
    mine.sort_by_key(|t| t.created);
    let list: Vec<Value> = mine
        .iter()
        .map(|t| {
            json!({
                "templateID": t.id,
                "buildID": t.build_id,
                "cpuCount": t.cpus,
                "memoryMB": t.memory_mb,
                "diskSizeMB": 0,
                "public": false,
                "aliases": t.names(),
                "names": t.names(),
                "createdAt": t.created.to_rfc3339(),
                "updatedAt": t.updated.to_rfc3339(),
                "createdBy": null,
                "lastSpawnedAt": null,
                "spawnCount": 0,
                "buildCount": t.builds,
                "envdVersion": super::ENVD_VERSION,
                "buildStatus": if t.image.is_some() { "ready" } else { "waiting" },
            })
        })
        .collect();
    axum::Json(Value::Array(list)).into_response()
}

/// `DELETE /templates/{id}` of a built template: it goes, with its image
/// unless another template was built to the same one. `None` if the key
/// has no template of that name.
pub async fn delete(server: &Server, tenant: usize, id: &str) -> Option<Response> {
    let built = server.built.owned(tenant, id)?;
    let (gone, shared) = server.built.remove(&built.id)?;
    if let Some(store) = server.registry.store() {
        let _ = store.remove_template(&gone.id);
    }
    server.built.uploads.forget(&gone.id);
    if let (Some(image), false) = (&gone.image, shared) {
        remove_image(server, image).await;
    }
    Some(StatusCode::NO_CONTENT.into_response())
}

/// Removes a template's image (a sandbox still running from it keeps it
/// until it ends).
pub async fn remove_image(server: &Server, image: &str) {
    let snapshot = dockhand::session::Snapshot {
        image: image.to_string(),
        id: String::new(),
        files: None,
    };
    if let Err(e) = server.client.remove_snapshot(&snapshot).await {
        tracing::warn!(image, error = %e, "removing a template's image");
    }
}

/// How long a template's ready command has to succeed in a new sandbox.
const READY_DEADLINE: std::time::Duration = std::time::Duration::from_secs(120);

/// Starts a new sandbox's start command (in the background, in a session
/// of its own, so it outlives the call that starts it) and waits until
/// its ready command succeeds.
pub async fn start_commands(
    session: &dockhand::session::Session,
    built: &Built,
) -> Result<(), String> {
    use dockhand::session::{ExecOptions, SessionApi as _};
    let call = |command: String| async move {
        session
            .exec_with(
                &command,
                ExecOptions::new()
                    .timeout(std::time::Duration::from_secs(10))
                    .cwd(super::config::HOME),
            )
            .await
    };
    if let Some(start) = &built.start_cmd {
        let quoted = shlex::try_quote(start).map_err(|e| format!("the start command: {e}"))?;
        let detached = format!("setsid sh -c {quoted} </dev/null >/tmp/.start.log 2>&1 &");
        let r = call(detached)
            .await
            .map_err(|e| format!("starting the start command: {e}"))?;
        if !r.success() {
            return Err(format!("the start command could not start: {}", r.stderr));
        }
    }
    let Some(ready) = &built.ready_cmd else {
        return Ok(());
    };
    let deadline = tokio::time::Instant::now() + READY_DEADLINE;
    loop {
        match call(ready.clone()).await {
            Ok(r) if r.success() => return Ok(()),
            Ok(_) | Err(_) if tokio::time::Instant::now() >= deadline => {
                return Err(format!(
                    "the template's ready command `{ready}` did not succeed within {} s",
                    READY_DEADLINE.as_secs()
                ))
            }
            _ => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
        }
    }
}
/// Built templates in the state directory.
impl Store {
    /// Stores a template a key built.
    pub fn put_template(&self, t: &Built) -> anyhow::Result<()> {
        self.lock().execute(
            "INSERT OR REPLACE INTO templates (id, key_hash, data) VALUES (?1, ?2, ?3)",
            rusqlite::params![t.id, t.key_hash, serde_json::to_string(t)?],
        )?;
        Ok(())
    }

    /// Forgets a template.
    pub fn remove_template(&self, id: &str) -> anyhow::Result<()> {
        self.lock()
            .execute("DELETE FROM templates WHERE id = ?1", rusqlite::params![id])?;
        Ok(())
    }

    /// Every stored template (with no tenant yet).
    pub fn templates(&self) -> anyhow::Result<Vec<Built>> {
        let db = self.lock();
        let mut query = db.prepare("SELECT id, data FROM templates")?;
        let rows = query.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
        let mut out = Vec::new();
        for row in rows {
            let (id, data) = row?;
            let t = serde_json::from_str(&data).with_context(|| {
                format!("template {id} in {} cannot be read", self.path().display())
            })?;
            out.push(t);
        }
        Ok(out)
    }
}
