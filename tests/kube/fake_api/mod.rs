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

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

mod agent;
pub mod agent_sandbox;
mod bridge;
mod claims;
mod docker_kubelet;
mod kubelet;
mod leases;
mod pods;
use leases::{
    create_companion, create_lease, create_policy, delete_companion, delete_lease, get_lease,
    list_leases, patch_companion, patch_lease,
};
use pods::{attach, create_pod, delete_pod, get_pod, list_or_watch_pods, log};

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
    /// The refusal's message, where it is not RBAC's (a quota's, a
    /// webhook's, as the API server words them).
    pub refuse_message: Option<&'static str>,
    /// Only the first this many matching requests are refused (an API
    /// server that says 429 or 503 for a while); `None`: all of them.
    pub refuse_times: Option<usize>,
    /// The first watch ends at once with a 410 `Expired` ERROR event.
    pub expire_first_watch: bool,
    /// The node cannot pull the pod's image.
    pub image_pull_fails: bool,
    /// No node has room: the scheduler leaves every pod Pending.
    pub unschedulable: bool,
    /// Long-lived pods (sessions, code hosts) run as real Docker
    /// containers (see `docker_kubelet`) instead of scripted programs.
    pub on_docker: bool,
    /// agent-sandbox's extensions are installed, and its controller
    /// (simulated) keeps warm pools and binds claims.
    pub agent_sandbox: bool,
    /// Its controller never binds a claim.
    pub claims_unbound: bool,
    pub outcome: Outcome,
}

impl Script {
    pub fn exits(code: i32, log: &str, produce: Produce) -> Script {
        Script {
            refuse: None,
            refuse_message: None,
            refuse_times: None,
            expire_first_watch: false,
            image_pull_fails: false,
            unschedulable: false,
            on_docker: false,
            agent_sandbox: false,
            claims_unbound: false,
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
    /// The pings each pod's `outputs` container got before `go`.
    pub output_pings: Vec<(String, usize)>,
    /// How many requests the scripted refusal answered.
    pub refused: usize,
    /// Every request a scripted session agent or bridge got: (pod, request).
    pub agent_requests: Vec<(String, Value)>,
    /// Files written through a scripted session agent: (pod, path) -> bytes.
    pub session_files: BTreeMap<(String, String), Vec<u8>>,
    /// The inputs archive of each pod, unpacked.
    pub inputs: BTreeMap<String, Files>,
    /// What each pod's `inputs` container got on its stdin, as sent.
    pub raw_inputs: BTreeMap<String, Vec<u8>>,
    logs: BTreeMap<String, String>,
    watches: usize,
    /// agent-sandbox's objects, by `plural/name`.
    pub custom: BTreeMap<String, Value>,
    /// Every agent-sandbox object ever created (plural, object as sent).
    pub custom_created: Vec<(String, Value)>,
    /// The sandboxes of warm pools, by pod name.
    pub sandboxes: BTreeMap<String, agent_sandbox::PoolSandbox>,
    /// Claims bound to a sandbox the pool had ready.
    pub warm_claims: usize,
    /// PersistentVolumeClaims, by name.
    pub claims: BTreeMap<String, Value>,
    /// Every PersistentVolumeClaim ever created, as the backend sent it.
    pub claims_created: Vec<Value>,
}

pub struct Fake {
    pub namespace: String,
    script: Script,
    record: Mutex<Record>,
    changed: tokio::sync::watch::Sender<u64>,
    /// Pods running as Docker containers, by pod name.
    docker: Mutex<BTreeMap<String, docker_kubelet::DockerPod>>,
    /// The simulated node's storage: a directory per bound claim.
    pub claims_dir: tempfile::TempDir,
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
        claims_dir: tempfile::tempdir().unwrap(),
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
            "/api/v1/namespaces/{ns}/persistentvolumeclaims",
            get(claims::list_claims).post(claims::create),
        )
        .route(
            "/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}",
            get(claims::get).patch(claims::patch).delete(claims::delete),
        )
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
            "/apis/extensions.agents.x-k8s.io/v1beta1",
            get(agent_sandbox::discovery),
        )
        .route(
            "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/{ns}/{plural}",
            get(agent_sandbox::list_or_watch).post(agent_sandbox::create),
        )
        .route(
            "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/{ns}/{plural}/{name}",
            get(agent_sandbox::get).delete(agent_sandbox::delete),
        )
        .route(
            "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies",
            axum::routing::post(create_policy),
        )
        .route(
            "/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/{name}",
            axum::routing::patch(
                |State(fake): State<Shared>,
                 Path((_, name)): Path<(String, String)>,
                 body: Bytes| async move {
                    patch_companion("networkpolicies", fake, name, body).await
                },
            )
            .delete(
                |State(fake): State<Shared>, Path((_, name)): Path<(String, String)>| async move {
                    delete_companion("networkpolicies", fake, name).await
                },
            ),
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
            "networkpolicies" => &mut self.policies,
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
    pub(super) fn update(&self, name: &str, change: impl FnOnce(&mut Value)) {
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

    /// The directory claim `name`'s files are on (made on first use).
    pub fn claim_dir(&self, name: &str) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = self.claims_dir.path().join(name);
        if !dir.exists() {
            std::fs::create_dir_all(&dir).unwrap();
            // Writable by the pod's user, as a volume with fsGroup is.
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        }
        dir
    }

    /// Deletes claim `name` and its files.
    pub fn remove_claim(&self, name: &str) -> Option<Value> {
        let claim = self.record(|r| r.claims.remove(name))?;
        let _ = std::fs::remove_dir_all(self.claims_dir.path().join(name));
        Some(claim)
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
            r.policies.retain(|_, p| !owned_by_pod(p));
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
        let matches = m == method && path.rsplit('/').next() == Some(resource);
        let refusing = matches
            && fake.record(|r| {
                let refuse = fake.script.refuse_times.is_none_or(|n| r.refused < n);
                r.refused += usize::from(refuse);
                refuse
            });
        if refusing {
            let ns = &fake.namespace;
            let (reason, message) = match code {
                403 if fake.script.refuse_message.is_some() => (
                    "Forbidden",
                    fake.script.refuse_message.unwrap_or_default().to_string(),
                ),
                403 => ("Forbidden", format!("{resource} is forbidden: User \"system:serviceaccount:{ns}:dockhand\" cannot {} resource \"{resource}\" in API group \"\" in the namespace \"{ns}\"", verb(&method))),
                404 => ("NotFound", format!("namespaces \"{ns}\" not found")),
                409 => ("AlreadyExists", format!("{resource} already exists")),
                429 => ("TooManyRequests", "the server has received too many requests and has asked us to try again later".to_string()),
                503 => ("ServiceUnavailable", "the server is currently unable to handle the request".to_string()),
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
