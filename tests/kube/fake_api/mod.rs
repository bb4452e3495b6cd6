//! A SIMULATED Kubernetes API server, for the backend's request flow.
//!
//! No control plane can run on this machine (no image can be pulled), so
//! this server answers the calls dockhand's Kubernetes backend makes, over
//! real HTTP and real WebSocket attach streams (the `v5.channel.k8s.io`
//! protocol), with the bodies and `Status` objects a real API server sends.
//! A scripted "kubelet" moves each pod through its states: the `inputs`
//! init container running, then (once its stdin is closed) `program`
//! running and ending as the script says. It runs no container: what the
//! program "writes" comes from the script, computed from the inputs archive
//! the backend really sent.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Path, Query, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

mod agent;
mod bridge;
mod docker_kubelet;
mod kubelet;
mod leases;
use kubelet::{give_outputs, running, take_inputs, waiting};
use leases::{
    create_companion, create_lease, create_policy, delete_companion, delete_lease, get_lease,
    list_leases, patch_companion, patch_lease,
};

/// Files of the inputs archive, by path inside `/var/inputs`.
pub type Files = BTreeMap<String, Vec<u8>>;
/// What the scripted program writes to `/var/outputs`, from its inputs.
pub type Produce = Arc<dyn Fn(&Files) -> Vec<(String, Vec<u8>)> + Send + Sync>;

/// How the scripted kubelet ends a pod's program once its inputs are in.
#[derive(Clone)]
pub enum Outcome {
    /// `program` ends with this exit code and kubelet reason, having logged `log`.
    Exit {
        code: i32,
        reason: &'static str,
        log: String,
        produce: Produce,
    },
    /// The node evicts the pod (memory pressure).
    Evicted,
    /// The node stops answering: the pod's phase becomes `Unknown`.
    NodeLost,
    /// Someone deletes the pod while it runs.
    Deleted,
    /// The program never ends.
    Hang,
}

/// What the server does beyond answering well.
#[derive(Clone)]
pub struct Script {
    /// `(method, last path segment, status)`: answered with that status and
    /// the API server's `Status` body instead.
    pub refuse: Option<(&'static str, &'static str, u16)>,
    /// The first watch ends at once with a 410 `Expired` ERROR event.
    pub expire_first_watch: bool,
    /// The node cannot pull the pod's image.
    pub image_pull_fails: bool,
    /// Long-lived pods (sessions, code hosts) run as real Docker
    /// containers (see `docker_kubelet`) instead of scripted programs.
    pub on_docker: bool,
    pub outcome: Outcome,
}

impl Script {
    pub fn exits(code: i32, log: &str, produce: Produce) -> Script {
        Script {
            refuse: None,
            expire_first_watch: false,
            image_pull_fails: false,
            on_docker: false,
            outcome: Outcome::Exit {
                code,
                reason: if code == 0 { "Completed" } else { "Error" },
                log: log.to_string(),
                produce,
            },
        }
    }

    /// Long-lived pods run as Docker containers of their spec.
    pub fn on_docker() -> Script {
        Script {
            on_docker: true,
            ..Script::idle()
        }
    }

    /// Nothing scripted beyond a one-shot that exits 0 and writes nothing
    /// (sessions and code hosts talk to the scripted agent and bridge).
    pub fn idle() -> Script {
        Script::exits(0, "", Arc::new(|_| Vec::new()))
    }

    pub fn ending(outcome: Outcome) -> Script {
        Script {
            outcome,
            ..Script::exits(0, "", Arc::new(|_| Vec::new()))
        }
    }
}

#[derive(Default)]
pub struct Record {
    rv: u64,
    uid: u64,
    pub pods: BTreeMap<String, Value>,
    pub leases: BTreeMap<String, Value>,
    pub policies: BTreeMap<String, Value>,
    pub secrets: BTreeMap<String, Value>,
    pub config_maps: BTreeMap<String, Value>,
    /// Every Secret and ConfigMap ever created (plural, object as sent).
    pub companions_created: Vec<(&'static str, Value)>,
    /// Every pod that was ever created, as the backend sent it.
    pub created: Vec<Value>,
    events: Vec<(u64, String, &'static str, Value)>,
    /// `METHOD path?query` of every request, in order.
    pub requests: Vec<String>,
    /// Every request a scripted session agent or bridge got: (pod, request).
    pub agent_requests: Vec<(String, Value)>,
    /// Files written through a scripted session agent: (pod, path) -> bytes.
    pub session_files: BTreeMap<(String, String), Vec<u8>>,
    /// The inputs archive of each pod, unpacked.
    pub inputs: BTreeMap<String, Files>,
    logs: BTreeMap<String, String>,
    watches: usize,
}

pub struct Fake {
    pub namespace: String,
    script: Script,
    record: Mutex<Record>,
    changed: tokio::sync::watch::Sender<u64>,
    /// Pods running as Docker containers, by pod name.
    docker: Mutex<BTreeMap<String, docker_kubelet::DockerPod>>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        let pods = std::mem::take(&mut *self.docker.lock().unwrap_or_else(|e| e.into_inner()));
        for name in pods.keys() {
            docker_kubelet::remove_container(name);
        }
    }
}

pub type Shared = Arc<Fake>;

/// Starts the server on a free port; returns its URL and its state.
pub async fn start(namespace: &str, script: Script) -> (String, Shared) {
    let fake = Arc::new(Fake {
        namespace: namespace.to_string(),
        script,
        record: Mutex::new(Record::default()),
        changed: tokio::sync::watch::channel(0).0,
        docker: Mutex::new(BTreeMap::new()),
    });
    let app = Router::new()
        .route("/version", get(version))
        .route(
            "/api/v1/namespaces/{ns}/pods",
            get(list_or_watch_pods).post(create_pod),
        )
        .route(
            "/api/v1/namespaces/{ns}/pods/{name}",
            get(get_pod).delete(delete_pod),
        )
        .route("/api/v1/namespaces/{ns}/pods/{name}/attach", get(attach))
        .route("/api/v1/namespaces/{ns}/pods/{name}/log", get(log))
        .route(
            "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
            get(list_leases).post(create_lease),
        )
        .route(
            "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}",
            get(get_lease).patch(patch_lease).delete(delete_lease),
        )
        .route(
            "/api/v1/namespaces/{ns}/{kind}",
            axum::routing::post(
                |State(fake): State<Shared>,
                 Path((_, kind)): Path<(String, String)>,
                 Json(object): Json<Value>| async move {
                    match companion_kind(&kind) {
                        Some(kind) => create_companion(kind, fake, object).await,
                        None => status_body(
                            404,
                            "NotFound",
                            "the server could not find the requested resource",
                        ),
                    }
                },
            ),
        )
        .route(
            "/api/v1/namespaces/{ns}/{kind}/{name}",
            axum::routing::patch(
                |State(fake): State<Shared>,
                 Path((_, kind, name)): Path<(String, String, String)>,
                 body: Bytes| async move {
                    match companion_kind(&kind) {
                        Some(kind) => patch_companion(kind, fake, name, body).await,
                        None => status_body(
                            404,
                            "NotFound",
                            "the server could not find the requested resource",
                        ),
                    }
                },
            )
            .delete(
                |State(fake): State<Shared>,
                 Path((_, kind, name)): Path<(String, String, String)>| async move {
                    match companion_kind(&kind) {
                        Some(kind) => delete_companion(kind, fake, name).await,
                        None => status_body(
                            404,
                            "NotFound",
                            "the server could not find the requested resource",
                        ),
                    }
                },
            ),
        )
        .route(
            "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
            axum::routing::post(create_policy),
        )
        .layer(axum::middleware::from_fn_with_state(fake.clone(), gate))
        .with_state(fake.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, fake)
}

/// The kinds a pod's companion objects can be, by their plural.
fn companion_kind(plural: &str) -> Option<&'static str> {
    match plural {
        "secrets" => Some("secrets"),
        "configmaps" => Some("configmaps"),
        _ => None,
    }
}

impl Record {
    /// The store of companions of `kind` (a plural).
    pub fn companions(&mut self, kind: &str) -> &mut BTreeMap<String, Value> {
        match kind {
            "secrets" => &mut self.secrets,
            _ => &mut self.config_maps,
        }
    }
}

impl Fake {
    pub fn record<T>(&self, read: impl FnOnce(&mut Record) -> T) -> T {
        read(&mut self.record.lock().unwrap())
    }

    /// Puts a pod or lease in place as another process would have made it.
    pub fn seed(&self, lease: Option<Value>, pod: Option<Value>) {
        self.record(|r| {
            if let Some(lease) = lease {
                let name = lease["metadata"]["name"].as_str().unwrap().to_string();
                r.leases.insert(name, lease);
            }
            if let Some(pod) = pod {
                let name = pod["metadata"]["name"].as_str().unwrap().to_string();
                r.pods.insert(name, pod);
            }
        })
    }

    /// Changes pod `name` (if it still exists) and tells the watchers.
    fn update(&self, name: &str, change: impl FnOnce(&mut Value)) {
        let rv = self.record(|r| {
            let pod = r.pods.get_mut(name)?;
            change(pod);
            r.rv += 1;
            pod["metadata"]["resourceVersion"] = json!(r.rv.to_string());
            let pod = pod.clone();
            r.events.push((r.rv, name.to_string(), "MODIFIED", pod));
            Some(r.rv)
        });
        if let Some(rv) = rv {
            self.changed.send_replace(rv);
        }
    }

    /// Deletes pod `name` as `kubectl delete` would (what it owns goes too).
    pub fn remove_pod(&self, name: &str) -> Option<Value> {
        if self.docker.lock().unwrap().remove(name).is_some() {
            let name = name.to_string();
            tokio::task::spawn_blocking(move || docker_kubelet::remove_container(&name));
        }
        let (pod, rv) = self.record(|r| {
            let pod = r.pods.remove(name)?;
            // The garbage collector: what the pod owned goes with it.
            let uid = pod["metadata"]["uid"].clone();
            let owned_by_pod = |o: &Value| {
                o["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|o| o.iter().any(|o| o["uid"] == uid))
            };
            r.secrets.retain(|_, s| !owned_by_pod(s));
            r.config_maps.retain(|_, m| !owned_by_pod(m));
            r.rv += 1;
            r.events
                .push((r.rv, name.to_string(), "DELETED", pod.clone()));
            Some((pod, r.rv))
        })?;
        self.changed.send_replace(rv);
        Some(pod)
    }
}

pub(super) fn status_body(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    });
    (StatusCode::from_u16(code).unwrap(), Json(body)).into_response()
}

/// Records every request; answers a scripted refusal as the API server would.
async fn gate(State(fake): State<Shared>, request: Request, next: Next) -> Response {
    let method = request.method().to_string();
    let uri = request.uri().to_string();
    fake.record(|r| r.requests.push(format!("{method} {uri}")));
    if let Some((m, resource, code)) = fake.script.refuse {
        let path = request.uri().path();
        if m == method && path.rsplit('/').next() == Some(resource) {
            let ns = &fake.namespace;
            let (reason, message) = match code {
                403 => ("Forbidden", format!("{resource} is forbidden: User \"system:serviceaccount:{ns}:dockhand\" cannot {} resource \"{resource}\" in API group \"\" in the namespace \"{ns}\"", verb(&method))),
                404 => ("NotFound", format!("namespaces \"{ns}\" not found")),
                409 => ("AlreadyExists", format!("{resource} already exists")),
                _ => ("InternalError", "an error on the server has prevented the request from succeeding".to_string()),
            };
            return status_body(code, reason, &message);
        }
    }
    next.run(request).await
}

fn verb(method: &str) -> &'static str {
    match method {
        "POST" => "create",
        "DELETE" => "delete",
        "PATCH" => "patch",
        _ => "get",
    }
}

async fn version() -> Json<Value> {
    Json(json!({
        "major": "1", "minor": "34", "gitVersion": "v1.34.1", "gitCommit": "0000000",
        "gitTreeState": "clean", "buildDate": "2025-09-09T19:44:50Z", "goVersion": "go1.24.6",
        "compiler": "gc", "platform": "linux/amd64"
    }))
}

pub(super) fn image_of(pod: &Value) -> String {
    pod["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

async fn create_pod(
    State(fake): State<Shared>,
    Path(ns): Path<String>,
    Json(mut pod): Json<Value>,
) -> Response {
    let name = pod["metadata"]["name"].as_str().unwrap_or("").to_string();
    let image = image_of(&pod);
    // A session's or code host's pod: no init container, its containers
    // start at once and live until stopped.
    let long_lived = pod["spec"]["initContainers"]
        .as_array()
        .is_none_or(|c| c.is_empty());
    let containers: Vec<String> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str().map(String::from))
        .collect();
    let exists = fake.record(|r| r.pods.contains_key(&name));
    if exists {
        return status_body(
            409,
            "AlreadyExists",
            &format!("pods \"{name}\" already exists"),
        );
    }
    let rv = fake.record(|r| {
        r.created.push(pod.clone());
        r.rv += 1;
        r.uid += 1;
        pod["metadata"]["uid"] = json!(format!("00000000-0000-0000-0000-{:012}", r.uid));
        pod["metadata"]["namespace"] = json!(ns);
        pod["metadata"]["resourceVersion"] = json!(r.rv.to_string());
        pod["metadata"]["creationTimestamp"] = json!("2026-11-26T12:00:00Z");
        pod["status"] = if long_lived {
            json!({"phase": "Pending", "qosClass": "Guaranteed",
                   "containerStatuses": containers.iter()
                       .map(|c| waiting(c, &image, "ContainerCreating", None))
                       .collect::<Vec<_>>()})
        } else {
            json!({
                "phase": "Pending", "qosClass": "Guaranteed",
                "initContainerStatuses": [waiting("inputs", &image, "PodInitializing", None)],
                "containerStatuses": [waiting("program", &image, "PodInitializing", None),
                                      waiting("outputs", &image, "PodInitializing", None)],
            })
        };
        r.pods.insert(name.clone(), pod.clone());
        r.events.push((r.rv, name.clone(), "ADDED", pod.clone()));
        r.rv
    });
    fake.changed.send_replace(rv);
    // The scheduler and kubelet: the first container starts, or its image
    // cannot be pulled.
    if long_lived && fake.script.on_docker && !fake.script.image_pull_fails {
        docker_kubelet::start(fake.clone(), name.clone(), pod.clone());
        return (StatusCode::CREATED, Json(pod)).into_response();
    }
    let kubelet = fake.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let fails = kubelet.script.image_pull_fails;
        let pull_failure = |container: &str| {
            waiting(
                container,
                &image,
                "ErrImagePull",
                Some(&format!(
                    "failed to pull and unpack image \"{image}\": not found"
                )),
            )
        };
        kubelet.update(&name, |pod| {
            if long_lived {
                let statuses: Vec<Value> = containers
                    .iter()
                    .map(|c| {
                        if fails {
                            pull_failure(c)
                        } else {
                            running(c, &image)
                        }
                    })
                    .collect();
                pod["status"]["phase"] = json!(if fails { "Pending" } else { "Running" });
                pod["status"]["containerStatuses"] = json!(statuses);
                return;
            }
            pod["status"]["phase"] = json!("Pending");
            pod["status"]["initContainerStatuses"] = json!([if fails {
                pull_failure("inputs")
            } else {
                running("inputs", &image)
            }]);
        });
    });
    (StatusCode::CREATED, Json(pod)).into_response()
}

pub(super) fn matches_labels(object: &Value, selector: Option<&String>) -> bool {
    let Some(selector) = selector else {
        return true;
    };
    selector.split(',').filter(|s| !s.is_empty()).all(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        object["metadata"]["labels"][k].as_str() == Some(v)
    })
}

pub(super) fn list(kind: &str, items: Vec<Value>, rv: u64) -> Json<Value> {
    Json(
        json!({"kind": kind, "apiVersion": "v1", "metadata": {"resourceVersion": rv.to_string()}, "items": items}),
    )
}

async fn list_or_watch_pods(
    State(fake): State<Shared>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    if q.get("watch").map(String::as_str) != Some("true") {
        let (items, rv) = fake.record(|r| {
            let items = r
                .pods
                .values()
                .filter(|p| matches_labels(p, q.get("labelSelector")))
                .cloned()
                .collect();
            (items, r.rv)
        });
        return list("PodList", items, rv).into_response();
    }
    let name = q
        .get("fieldSelector")
        .and_then(|f| f.strip_prefix("metadata.name="))
        .unwrap_or("")
        .to_string();
    let since: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let first = fake.record(|r| {
        r.watches += 1;
        r.watches == 1
    });
    if first && fake.script.expire_first_watch {
        let line = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": format!("too old resource version: {since} (999)"),
            "reason": "Expired", "code": 410}});
        return Body::from(format!("{line}\n")).into_response();
    }
    let changed = fake.changed.subscribe();
    Body::from_stream(events_after(fake.clone(), name, since, changed)).into_response()
}

/// The watch's events for `name` after version `since`, then each new one.
fn events_after(
    fake: Shared,
    name: String,
    since: u64,
    changed: tokio::sync::watch::Receiver<u64>,
) -> impl futures::Stream<Item = Result<Bytes, std::convert::Infallible>> {
    futures::stream::unfold(
        (fake, since, changed),
        move |(fake, mut seen, mut changed)| {
            let name = name.clone();
            async move {
                loop {
                    let next = fake.record(|r| {
                        r.events
                            .iter()
                            .find(|(rv, n, _, _)| *rv > seen && *n == name)
                            .map(|(rv, _, kind, pod)| (*rv, json!({"type": kind, "object": pod})))
                    });
                    if let Some((rv, event)) = next {
                        seen = rv;
                        let line = Bytes::from(format!("{event}\n"));
                        return Some((Ok(line), (fake, seen, changed)));
                    }
                    tokio::select! {
                        _ = changed.changed() => {}
                        _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                    }
                }
            }
        },
    )
}

async fn get_pod(State(fake): State<Shared>, Path((_, name)): Path<(String, String)>) -> Response {
    match fake.record(|r| r.pods.get(&name).cloned()) {
        Some(pod) => Json(pod).into_response(),
        None => status_body(404, "NotFound", &format!("pods \"{name}\" not found")),
    }
}

async fn delete_pod(
    State(fake): State<Shared>,
    Path((_, name)): Path<(String, String)>,
) -> Response {
    match fake.remove_pod(&name) {
        Some(pod) => Json(pod).into_response(),
        None => status_body(404, "NotFound", &format!("pods \"{name}\" not found")),
    }
}

async fn attach(
    State(fake): State<Shared>,
    Path((_, name)): Path<(String, String)>,
    Query(q): Query<BTreeMap<String, String>>,
    upgrade: WebSocketUpgrade,
) -> Response {
    let container = q.get("container").cloned().unwrap_or_default();
    let state = fake.record(|r| r.pods.get(&name).cloned());
    let Some(pod) = state else {
        return status_body(404, "NotFound", &format!("pods \"{name}\" not found"));
    };
    let is_running = [
        &pod["status"]["initContainerStatuses"],
        &pod["status"]["containerStatuses"],
    ]
    .iter()
    .filter_map(|list| list.as_array())
    .flatten()
    .any(|c| c["name"] == json!(container) && c["state"]["running"].is_object());
    if !is_running {
        return status_body(
            400,
            "BadRequest",
            &format!("container {container} is not running"),
        );
    }
    upgrade
        .protocols(["v5.channel.k8s.io", "v4.channel.k8s.io"])
        .on_upgrade(move |socket| async move {
            if fake.script.on_docker && fake.docker.lock().unwrap().contains_key(&name) {
                return docker_kubelet::attach(fake, name, socket).await;
            }
            match container.as_str() {
                "inputs" => take_inputs(fake, name, socket).await,
                "outputs" => give_outputs(fake, name, socket).await,
                "agent" => agent::converse(fake, name, socket).await,
                "bridge" => bridge::converse(fake, name, socket).await,
                _ => {}
            }
        })
}

async fn log(State(fake): State<Shared>, Path((_, name)): Path<(String, String)>) -> Response {
    // As with `follow=true`: the body ends when the container does.
    loop {
        let (done, text) = fake.record(|r| {
            let pod = r.pods.get(&name);
            let ended = pod.is_none_or(|p| {
                let phase = p["status"]["phase"].as_str().unwrap_or("");
                phase == "Failed"
                    || phase == "Unknown"
                    || p["status"]["containerStatuses"][0]["state"]["terminated"].is_object()
            });
            (ended, r.logs.get(&name).cloned().unwrap_or_default())
        });
        if done {
            return text.into_response();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
