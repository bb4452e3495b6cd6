//! envd's directory watching: `WatchDir` (a stream, which the async SDK
//! uses) and `CreateWatcher`, `GetWatcherEvents`, `RemoveWatcher` (which
//! the sync SDK polls). Events come from inotify in the session's agent;
//! where it cannot watch (the machine's inotify instances used up), from
//! comparing listings made every 200 ms.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use axum::response::Response;
use dockhand::session::{FileEvent, FileEventKind, FileWatch, Session, SessionApi};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{json, Value};

use super::connect::{self, ConnectError};
use super::errors::file_error;
use super::files::absolute;
use super::lock;
use super::registry::Sandbox;
use super::watchers::Watcher;

/// How often a watched tree is listed.
const POLL: Duration = Duration::from_millis(200);
/// The most entries a watch follows (the rest are not seen).
const MAX_ENTRIES: usize = 10_000;
/// The most levels a recursive watch descends.
const MAX_DEPTH: usize = 16;
/// Watchers one sandbox may have.
const MAX_WATCHERS: usize = 64;

/// What a listing says of one path: kind, size, modification time.
type Seen = (String, u64, u64);
/// A tree's paths, relative to the watched directory.
type Snapshot = BTreeMap<String, Seen>;

async fn snapshot(
    session: &Session,
    root: &str,
    recursive: bool,
) -> Result<Snapshot, ConnectError> {
    let mut out = Snapshot::new();
    let mut level = vec![String::new()];
    for _ in 0..if recursive { MAX_DEPTH } else { 1 } {
        let mut next = Vec::new();
        for rel in level {
            let dir = if rel.is_empty() {
                root.to_string()
            } else {
                format!("{root}/{rel}")
            };
            let entries = match session.list_dir(&dir).await {
                Ok(e) => e,
                // A subdirectory that went between two listings.
                Err(_) if !rel.is_empty() => continue,
                Err(e) => return Err(file_error(&e)),
            };
            for e in entries {
                if out.len() >= MAX_ENTRIES {
                    return Ok(out);
                }
                let path = if rel.is_empty() {
                    e.name.clone()
                } else {
                    format!("{rel}/{}", e.name)
                };
                if e.kind == "dir" {
                    next.push(path.clone());
                }
                out.insert(path, (e.kind, e.size, e.mtime_ns));
            }
        }
        level = next;
    }
    Ok(out)
}

fn event(name: &str, kind: &str) -> Value {
    json!({"name": name, "type": kind})
}

/// envd's event for one the agent saw (none for an overflow: envd has no
/// word for it).
fn envd_event(e: &FileEvent) -> Option<Value> {
    let kind = match e.kind {
        FileEventKind::Create => "EVENT_TYPE_CREATE",
        FileEventKind::Write => "EVENT_TYPE_WRITE",
        FileEventKind::Remove => "EVENT_TYPE_REMOVE",
        FileEventKind::Rename => "EVENT_TYPE_RENAME",
        FileEventKind::Chmod => "EVENT_TYPE_CHMOD",
        _ => return None,
    };
    Some(event(&e.path, kind))
}

/// How a watch learns of changes.
enum Source {
    /// The agent's inotify watch.
    Events(FileWatch),
    /// Listings compared, from this first one.
    Listings(Snapshot),
}

/// The events that turn `old` into `new`, in path order.
fn diff(old: &Snapshot, new: &Snapshot) -> Vec<Value> {
    let mut out = Vec::new();
    for (path, seen) in new {
        match old.get(path) {
            None => out.push(event(path, "EVENT_TYPE_CREATE")),
            Some(before) if before.0 != seen.0 => {
                out.push(event(path, "EVENT_TYPE_REMOVE"));
                out.push(event(path, "EVENT_TYPE_CREATE"));
            }
            Some(before) if before != seen && seen.0 != "dir" => {
                out.push(event(path, "EVENT_TYPE_WRITE"))
            }
            _ => {}
        }
    }
    for path in old.keys().filter(|p| !new.contains_key(*p)) {
        out.push(event(path, "EVENT_TYPE_REMOVE"));
    }
    out
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WatchRequest {
    path: String,
    recursive: bool,
    #[serde(alias = "watcher_id")]
    #[serde(rename = "watcherId")]
    watcher_id: String,
}

async fn start(
    sandbox: &Sandbox,
    request: &WatchRequest,
) -> Result<(String, Source), ConnectError> {
    let root = absolute(&request.path);
    let info = sandbox
        .session
        .stat(&root)
        .await
        .map_err(|e| file_error(&e))?;
    if info.kind != "dir" {
        return Err(ConnectError::new(
            "invalid_argument",
            format!("{root} is not a directory"),
        ));
    }
    let source = match sandbox.session.watch(&info.path, request.recursive).await {
        Ok(events) => Source::Events(events),
        Err(e) => {
            tracing::debug!(error = %e, "watching by listings");
            Source::Listings(snapshot(&sandbox.session, &info.path, request.recursive).await?)
        }
    };
    Ok((info.path, source))
}

/// `CreateWatcher`, `GetWatcherEvents`, `RemoveWatcher`.
pub async fn unary(
    sandbox: &Arc<Sandbox>,
    method: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    let result = async {
        let request: WatchRequest = connect::unary_request(headers, body)?;
        match method {
            "CreateWatcher" => create(sandbox, &request).await,
            "GetWatcherEvents" => {
                let watcher = sandbox
                    .watchers
                    .lock()
                    .get(&request.watcher_id)
                    .cloned()
                    .ok_or_else(|| ConnectError::new("not_found", "watcher not found"))?;
                let events: Vec<Value> = lock(&watcher.pending).drain(..).collect();
                if events.is_empty() {
                    if let Some(e) = lock(&watcher.failed).clone() {
                        return Err(e);
                    }
                }
                Ok(json!({ "events": events }))
            }
            _ => {
                sandbox.watchers.lock().remove(&request.watcher_id);
                Ok(json!({}))
            }
        }
    }
    .await;
    connect::unary_response(result)
}

async fn create(sandbox: &Arc<Sandbox>, request: &WatchRequest) -> Result<Value, ConnectError> {
    if sandbox.watchers.lock().len() >= MAX_WATCHERS {
        return Err(ConnectError::new(
            "resource_exhausted",
            format!("a sandbox may have {MAX_WATCHERS} watchers; remove some first"),
        ));
    }
    let (root, source) = start(sandbox, request).await?;
    let id = uuid::Uuid::new_v4().simple().to_string();
    let recursive = request.recursive;
    let (session, weak) = (sandbox.session.clone(), Arc::downgrade(sandbox));
    let watch_id = id.clone();
    let task = tokio::spawn(async move {
        let mut seen = match source {
            Source::Listings(first) => first,
            Source::Events(mut events) => {
                while let Some(next) = events.next().await {
                    let Some(sandbox) = weak.upgrade() else {
                        return;
                    };
                    let Some(watcher) = sandbox.watchers.lock().get(&watch_id).cloned() else {
                        return;
                    };
                    match next {
                        Ok(e) => watcher.queue(envd_event(&e)),
                        Err(e) => {
                            *lock(&watcher.failed) = Some(file_error(&e));
                            return;
                        }
                    }
                }
                return;
            }
        };
        loop {
            tokio::time::sleep(POLL).await;
            let Some(sandbox) = weak.upgrade() else {
                return;
            };
            let Some(watcher) = sandbox.watchers.lock().get(&watch_id).cloned() else {
                return;
            };
            match snapshot(&session, &root, recursive).await {
                Ok(now) => {
                    watcher.queue(diff(&seen, &now));
                    seen = now;
                }
                Err(e) => {
                    *lock(&watcher.failed) = Some(e);
                    return;
                }
            }
        }
    });
    let watcher = Arc::new(Watcher {
        pending: Mutex::new(VecDeque::new()),
        failed: Mutex::new(None),
        task: task.abort_handle(),
    });
    sandbox.watchers.lock().insert(id.clone(), watcher);
    Ok(json!({ "watcherId": id }))
}

/// `WatchDir`: events as a stream, until the client hangs up.
pub async fn stream(sandbox: Arc<Sandbox>, headers: &HeaderMap, body: &[u8]) -> Response {
    let request: WatchRequest = match connect::stream_request(headers, body) {
        Ok(r) => r,
        Err(e) => return connect::stream_error(e),
    };
    let (root, source) = match start(&sandbox, &request).await {
        Ok(s) => s,
        Err(e) => return connect::stream_error(e),
    };
    let keepalive = connect::keepalive(headers);
    let recursive = request.recursive;
    let start = futures::stream::once(async { Ok(json!({"start": {}})) });
    let seen = match source {
        Source::Listings(first) => first,
        Source::Events(events) => {
            return connect::stream_response(futures::StreamExt::chain(
                start,
                inotify_events(events, keepalive),
            ))
        }
    };
    let state = (
        sandbox.session.clone(),
        seen,
        VecDeque::<Value>::new(),
        Instant::now(),
    );
    let events = futures::stream::unfold(Some(state), move |state| {
        let root = root.clone();
        async move {
            let (session, mut seen, mut pending, mut quiet_since) = state?;
            loop {
                if let Some(event) = pending.pop_front() {
                    return Some((
                        Ok(json!({ "filesystem": event })),
                        Some((session, seen, pending, Instant::now())),
                    ));
                }
                if quiet_since.elapsed() >= keepalive {
                    quiet_since = Instant::now();
                    return Some((
                        Ok(json!({"keepalive": {}})),
                        Some((session, seen, pending, quiet_since)),
                    ));
                }
                tokio::time::sleep(POLL).await;
                match snapshot(&session, &root, recursive).await {
                    Ok(now) => {
                        pending.extend(diff(&seen, &now));
                        seen = now;
                    }
                    Err(e) => return Some((Err(e), None)),
                }
            }
        }
    });
    connect::stream_response(futures::StreamExt::chain(start, events))
}

/// The agent's events as envd's stream messages, with keepalives while
/// nothing happens; an error ends the stream.
fn inotify_events(
    events: FileWatch,
    keepalive: Duration,
) -> impl futures::Stream<Item = Result<Value, ConnectError>> {
    futures::stream::unfold(Some(events), move |events| async move {
        let mut events = events?;
        loop {
            match tokio::time::timeout(keepalive, events.next()).await {
                Err(_) => return Some((Ok(json!({"keepalive": {}})), Some(events))),
                Ok(None) => return None,
                Ok(Some(Err(e))) => return Some((Err(file_error(&e)), None)),
                Ok(Some(Ok(e))) => {
                    if let Some(event) = envd_event(&e) {
                        return Some((Ok(json!({ "filesystem": event })), Some(events)));
                    }
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(entries: &[(&str, &str, u64, u64)]) -> Snapshot {
        entries
            .iter()
            .map(|(p, k, s, m)| (p.to_string(), (k.to_string(), *s, *m)))
            .collect()
    }

    #[test]
    fn changes_become_envd_events() {
        let old = snap(&[
            ("a.txt", "file", 1, 1),
            ("d", "dir", 0, 1),
            ("gone", "file", 1, 1),
        ]);
        let new = snap(&[
            ("a.txt", "file", 2, 2),
            ("d", "dir", 0, 2),
            ("d/new", "file", 0, 3),
        ]);
        let events = diff(&old, &new);
        let pairs: Vec<(String, String)> = events
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().into(),
                    e["type"].as_str().unwrap().into(),
                )
            })
            .collect();
        assert_eq!(
            pairs,
            [
                ("a.txt".to_string(), "EVENT_TYPE_WRITE".to_string()),
                ("d/new".into(), "EVENT_TYPE_CREATE".into()),
                ("gone".into(), "EVENT_TYPE_REMOVE".into()),
            ]
        );
        assert!(diff(&new, &new).is_empty());
    }
}
