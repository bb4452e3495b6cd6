//! E2B's control plane: create, get, list, kill, time out and connect to
//! sandboxes, each key seeing only its own.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use dockhand::session::PauseMode;
use dockhand::{Egress, Network};
use serde::Deserialize;
use serde_json::{json, Value};

use super::errors::{api_error, not_found, sdk_failure};
use super::interpreter::env_update_code;
use super::registry::{sandbox_id, Full, NewSandbox, Sandbox};
use super::telemetry::Failure;
use super::{json_or_default, query_pairs};
use super::{Server, ENVD_VERSION};

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
pub struct CreateRequest {
    #[serde(rename = "templateID")]
    template_id: String,
    timeout: Option<u64>,
    metadata: Option<BTreeMap<String, String>>,
    env_vars: Option<BTreeMap<String, String>>,
    #[serde(rename = "allow_internet_access")]
    allow_internet_access: Option<bool>,
    network: Option<NetworkRequest>,
    auto_pause: Option<bool>,
    auto_pause_memory: Option<bool>,
    auto_resume: Option<AutoResume>,
    mcp: Option<Value>,
    volume_mounts: Option<Value>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct AutoResume {
    enabled: bool,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct NetworkRequest {
    allow_out: Option<Vec<String>>,
    deny_out: Option<Vec<String>>,
    rules: Option<Value>,
    /// Ports reached without the traffic token (E2B's; off unless asked).
    allow_public_traffic: Option<bool>,
}

/// The network a request asks for: dockhand's egress policy for E2B's
/// options. `0.0.0.0/0` in `denyOut` is E2B's "nothing but `allowOut`".
fn network_of(request: &CreateRequest, internet_default: bool) -> Result<Network, String> {
    let internet = request.allow_internet_access.unwrap_or(internet_default);
    if let Some(rules) = request.network.as_ref().and_then(|n| n.rules.as_ref()) {
        if rules.as_object().is_some_and(|r| !r.is_empty()) {
            return Err(
                "per-host request transforms (rules) are not served; dockhand's secrets bound to hosts do that job"
                    .into(),
            );
        }
    }
    let (allow_out, deny_out) = match &request.network {
        Some(n) => (
            n.allow_out.clone().unwrap_or_default(),
            n.deny_out.clone().unwrap_or_default(),
        ),
        None => (Vec::new(), Vec::new()),
    };
    let deny_all = deny_out.iter().any(|d| d == "0.0.0.0/0" || d == "::/0");
    let denied: Vec<String> = deny_out
        .into_iter()
        .filter(|d| d != "0.0.0.0/0" && d != "::/0")
        .collect();
    let allowed = if !allow_out.is_empty() {
        allow_out
    } else if internet && !deny_all {
        vec!["*".to_string()]
    } else {
        Vec::new()
    };
    if allowed.is_empty() {
        return Ok(Network::None);
    }
    let policy = Egress::allow(allowed).deny(denied);
    policy.check().map_err(|e| e.to_string())?;
    Ok(Network::Egress(policy))
}

fn seconds(timeout: Option<u64>, default: Duration, max: Duration) -> Duration {
    timeout.map(Duration::from_secs).unwrap_or(default).min(max)
}

/// The sandbox as `POST /sandboxes` and `connect` answer; with the
/// server's domain, the SDKs' `get_host(port)` names this server.
fn created(sandbox: &Sandbox, domain: Option<&str>) -> Value {
    let mut v = json!({
        "templateID": sandbox.template,
        "sandboxID": sandbox.id,
        "clientID": "dockhand",
        "alias": sandbox.template,
        "envdVersion": ENVD_VERSION,
        "envdAccessToken": sandbox.envd_token,
        "trafficAccessToken": sandbox.traffic_token,
    });
    if let Some(domain) = domain {
        v["domain"] = json!(domain);
    }
    v
}

fn listed(sandbox: &Sandbox) -> Value {
    json!({
        "templateID": sandbox.template,
        "sandboxID": sandbox.id,
        "clientID": "dockhand",
        "alias": sandbox.template,
        "startedAt": sandbox.started_at.to_rfc3339(),
        "endAt": sandbox.end_at().to_rfc3339(),
        "cpuCount": sandbox.cpus,
        "memoryMB": sandbox.memory_mb,
        "diskSizeMB": 0,
        "state": sandbox.state_name(),
        "envdVersion": ENVD_VERSION,
        "metadata": sandbox.metadata,
    })
}

fn detail(sandbox: &Sandbox) -> Value {
    let mut v = listed(sandbox);
    v["envdAccessToken"] = json!(sandbox.envd_token);
    v["allowInternetAccess"] = json!(sandbox.internet);
    v
}

/// `POST /sandboxes`, counted: every create ends as a sandbox or as a
/// failure with its cause.
pub async fn create(server: Arc<Server>, tenant: usize, body: &[u8]) -> Response {
    let started = std::time::Instant::now();
    let _in_flight = server.telemetry.create_started();
    let mut template = String::new();
    match create_sandbox(&server, tenant, body, &mut template).await {
        Ok(response) => {
            server.telemetry.created(&template, started.elapsed());
            response
        }
        Err(Refused(cause, response)) => {
            server.telemetry.create_failed(&template, cause);
            response
        }
    }
}

/// A create that did not end in a sandbox: why, and the answer.
struct Refused(Failure, Response);

fn bad_request(message: impl Into<String>) -> Refused {
    Refused(
        Failure::BadRequest,
        api_error(StatusCode::BAD_REQUEST, message),
    )
}

/// The create itself; `served` is set to the template's name once it is
/// known to be one the server serves.
async fn create_sandbox(
    server: &Arc<Server>,
    tenant: usize,
    body: &[u8],
    served: &mut String,
) -> Result<Response, Refused> {
    let request: CreateRequest = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => return Err(bad_request(format!("bad request body: {e}"))),
    };
    // A snapshot of the key's names its source's template and its image;
    // so does a template the key built.
    let snapshot = server.snapshots.owned(tenant, &request.template_id);
    let built = match snapshot {
        Some(_) => None,
        None => server.built.owned(tenant, &request.template_id),
    };
    if built.as_ref().is_some_and(|b| b.image.is_none()) {
        return Err(bad_request(format!(
            "template '{}' has no finished build yet",
            request.template_id
        )));
    }
    let template_name = match (&snapshot, &built) {
        (Some(s), _) => s.template.as_str(),
        (None, Some(b)) => b.base.as_str(),
        (None, None) => request.template_id.as_str(),
    };
    let Some(template) = server.templates.get(template_name) else {
        let known: Vec<&str> = server.templates.keys().map(String::as_str).collect();
        return Err(bad_request(format!(
            "template '{}' is not served here (templates: {})",
            request.template_id,
            known.join(", ")
        )));
    };
    served.clone_from(&template.name);
    let on_timeout_pause = (request.auto_pause == Some(true)).then(|| {
        request.auto_pause_memory.map(|memory| {
            if memory {
                PauseMode::Memory
            } else {
                PauseMode::Filesystem
            }
        })
    });
    let auto_resume = request.auto_resume.as_ref().is_some_and(|r| r.enabled);
    if auto_resume && on_timeout_pause.is_none() {
        return Err(bad_request(
            "autoResume needs autoPause (on_timeout: pause)",
        ));
    }
    if request.mcp.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(bad_request("mcp is not supported by dockhand serve"));
    }
    let volumes = match &request.volume_mounts {
        Some(asked) => match super::volumes::mounts(server, tenant, asked).await {
            Ok(volumes) => volumes,
            Err(e) => return Err(bad_request(e)),
        },
        None => Vec::new(),
    };
    let network = match network_of(&request, server.limits.internet_default) {
        Ok(n) => n,
        Err(e) => return Err(bad_request(format!("network: {e}"))),
    };
    let limits = &server.limits;
    let slot = match server
        .registry
        .reserve(tenant, limits.max_per_key, limits.max_total)
    {
        Ok(slot) => slot,
        Err(Full::Key(n)) => {
            return Err(Refused(Failure::KeyLimit, api_error(
                StatusCode::TOO_MANY_REQUESTS,
                format!("this key already has {n} sandboxes running or starting, the server's limit per key; kill some first"),
            )))
        }
        Err(Full::Server(n)) => {
            return Err(Refused(Failure::ServerLimit, api_error(
                StatusCode::TOO_MANY_REQUESTS,
                format!("the server runs {n} sandboxes (running or starting), its limit; try again later"),
            )))
        }
    };
    let timeout = seconds(
        request.timeout,
        server.limits.default_timeout,
        server.limits.max_timeout,
    );
    let internet = !matches!(network, Network::None);
    let image = match (&snapshot, &built) {
        (Some(s), _) => Some(s.image.as_str()),
        (None, Some(b)) => b.image.as_deref(),
        (None, None) => None,
    };
    let frozen = snapshot.as_ref().and_then(|s| s.frozen.clone());
    if frozen.is_some() && (internet || !volumes.is_empty()) {
        return Err(bad_request(
            "a sandbox from a memory snapshot has its source's network and volumes; ask for neither",
        ));
    }
    // A start waits its turn; a ready warm sandbox is handed over at once.
    let warm = frozen.is_none() && server.warm_ready(template, &network, image, &volumes);
    let _turn = match warm {
        true => None,
        false => match server.admission.turn().await {
            Ok(turn) => Some(turn),
            Err(busy) => {
                let mut answer = api_error(StatusCode::TOO_MANY_REQUESTS, busy.to_string());
                answer.headers_mut().insert(
                    axum::http::header::RETRY_AFTER,
                    axum::http::HeaderValue::from_static("1"),
                );
                return Err(Refused(Failure::Busy, answer));
            }
        },
    };
    let made = match &frozen {
        Some(frozen) => frozen.fork().await,
        None => {
            let files = snapshot.as_ref().and_then(|s| s.files.as_deref());
            server
                .container(template, network, image, files, &volumes)
                .await
        }
    };
    let (session, kernel) = match made {
        Ok(parts) => parts,
        Err(e) => {
            return Err(Refused(
                Failure::StartFailed,
                sdk_failure(format!("starting a `{}` sandbox", template.name), &e),
            ))
        }
    };
    let envs = request.env_vars.unwrap_or_default();
    let sandbox = Arc::new(Sandbox::new(NewSandbox {
        id: sandbox_id(),
        tenant,
        key_hash: server.keys.hash_of(tenant),
        template: template.name.clone(),
        metadata: request.metadata.unwrap_or_default(),
        envs: envs.clone(),
        internet,
        public: request
            .network
            .as_ref()
            .and_then(|n| n.allow_public_traffic)
            .unwrap_or(false),
        cpus: template.cpus,
        memory_mb: template.memory_mb,
        timeout,
        session,
        kernel,
        on_timeout_pause,
        auto_resume,
    }));
    if let (Some(kernel), false) = (&sandbox.kernel, envs.is_empty()) {
        if let Err(e) = kernel
            .run(&env_update_code(&envs, dockhand::kernel::Language::Python))
            .await
        {
            sandbox.close().await;
            return Err(Refused(
                Failure::SetupFailed,
                api_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("setting envVars: {e}"),
                ),
            ));
        }
    }
    if let Some(built) = &built {
        if let Err(e) = super::templates::start_commands(&sandbox.session, built).await {
            sandbox.close().await;
            return Err(Refused(
                Failure::SetupFailed,
                api_error(StatusCode::INTERNAL_SERVER_ERROR, e),
            ));
        }
    }
    slot.fill(sandbox.clone());
    server.registry.persist(&sandbox);
    Ok((
        StatusCode::CREATED,
        axum::Json(created(&sandbox, server.limits.domain.as_deref())),
    )
        .into_response())
}

/// `GET /sandboxes/{id}`.
pub fn get(server: &Server, tenant: usize, id: &str) -> Response {
    match server.registry.owned(tenant, id) {
        Some(s) => axum::Json(detail(&s)).into_response(),
        None => not_found(id),
    }
}

/// The `metadata` filter: `k=v&k2=v2`, URL-encoded as one parameter.
fn metadata_filter(query: &BTreeMap<String, String>) -> Vec<(String, String)> {
    query
        .get("metadata")
        .map(|raw| query_pairs(raw))
        .unwrap_or_default()
}

/// `GET /sandboxes` and `/v2/sandboxes`.
pub fn list(server: &Server, tenant: usize, query: &BTreeMap<String, String>) -> Response {
    let wanted = metadata_filter(query);
    let states = query.get("state").cloned().unwrap_or_default();
    let list: Vec<Value> = server
        .registry
        .of(tenant)
        .iter()
        .filter(|s| states.is_empty() || states.split(',').any(|w| w == s.state_name()))
        .filter(|s| wanted.iter().all(|(k, v)| s.metadata.get(k) == Some(v)))
        .filter(|s| query.get("template").is_none_or(|t| *t == s.template))
        .map(|s| listed(s))
        .collect();
    axum::Json(Value::Array(list)).into_response()
}

/// `DELETE /sandboxes/{id}`.
pub async fn kill(server: &Server, tenant: usize, id: &str) -> Response {
    match server.registry.remove_owned(tenant, id) {
        Some(sandbox) => {
            sandbox.close().await;
            StatusCode::NO_CONTENT.into_response()
        }
        None => not_found(id),
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct TimeoutRequest {
    timeout: Option<u64>,
    duration: Option<u64>,
}

/// `POST /sandboxes/{id}/timeout` (`set`), `/refreshes` and `/connect`
/// (`extend` only).
pub fn timeout(server: &Server, tenant: usize, id: &str, body: &[u8], set: bool) -> Response {
    let Some(sandbox) = server.registry.owned(tenant, id) else {
        return not_found(id);
    };
    let request: TimeoutRequest = match json_or_default(body) {
        Ok(r) => r,
        Err(e) => return api_error(StatusCode::BAD_REQUEST, e),
    };
    let limits = &server.limits;
    let asked = request.timeout.or(request.duration);
    if set {
        let Some(asked) = asked else {
            return api_error(StatusCode::BAD_REQUEST, "timeout is missing");
        };
        sandbox.set_timeout(seconds(
            Some(asked),
            limits.default_timeout,
            limits.max_timeout,
        ));
        server.registry.persist(&sandbox);
        return StatusCode::NO_CONTENT.into_response();
    }
    if let Some(asked) = asked {
        sandbox.extend(seconds(
            Some(asked),
            limits.default_timeout,
            limits.max_timeout,
        ));
    }
    server.registry.persist(&sandbox);
    StatusCode::NO_CONTENT.into_response()
}

/// `POST /sandboxes/{id}/connect`: the sandbox again, resumed if it was
/// paused (201) or as it was (200), its timeout extended.
pub async fn connect(server: &Server, tenant: usize, id: &str, body: &[u8]) -> Response {
    let Some(sandbox) = server.registry.owned(tenant, id) else {
        return not_found(id);
    };
    let request: TimeoutRequest = match json_or_default(body) {
        Ok(r) => r,
        Err(e) => return api_error(StatusCode::BAD_REQUEST, e),
    };
    let resumed = match sandbox.resume().await {
        Ok(resumed) => resumed,
        Err(e) => return resume_failed(server, &sandbox, e).await,
    };
    let limits = &server.limits;
    let timeout = seconds(request.timeout, limits.default_timeout, limits.max_timeout);
    if resumed {
        sandbox.set_timeout(timeout);
    } else if request.timeout.is_some() {
        sandbox.extend(timeout);
    }
    server.registry.persist(&sandbox);
    let status = if resumed {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    (
        status,
        axum::Json(created(&sandbox, server.limits.domain.as_deref())),
    )
        .into_response()
}

/// `POST /sandboxes/{id}/resume` (the older call): 409 when it runs.
pub async fn resume(server: &Server, tenant: usize, id: &str, body: &[u8]) -> Response {
    match server.registry.owned(tenant, id) {
        None => not_found(id),
        Some(sandbox) if !sandbox.is_paused() => api_error(
            StatusCode::CONFLICT,
            format!("sandbox {id} is already running"),
        ),
        Some(_) => connect(server, tenant, id, body).await,
    }
}

/// A resume that failed: the sandbox is gone (its checkpoint refused, or
/// its container removed from outside), so it leaves the registry.
async fn resume_failed(server: &Server, sandbox: &Sandbox, e: dockhand::Error) -> Response {
    tracing::warn!(sandbox = %sandbox.id, error = %e, "resuming failed: the sandbox is removed");
    if let Some(s) = server.registry.remove_owned(sandbox.tenant, &sandbox.id) {
        s.close().await;
    }
    api_error(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!(
            "resuming sandbox {} failed, and it was removed: {e}",
            sandbox.id
        ),
    )
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct PauseRequest {
    memory: Option<bool>,
}

/// `POST /sandboxes/{id}/pause`: 204, or 409 when it is paused already.
/// `memory` unset pauses with memory where the daemon can save it (gVisor
/// with checkpoints), on files elsewhere; `true` there is refused.
pub async fn pause(server: &Server, tenant: usize, id: &str, body: &[u8]) -> Response {
    let Some(sandbox) = server.registry.owned(tenant, id) else {
        return not_found(id);
    };
    let request: PauseRequest = match json_or_default(body) {
        Ok(r) => r,
        Err(e) => return api_error(StatusCode::BAD_REQUEST, e),
    };
    let mode = request.memory.map(|memory| {
        if memory {
            PauseMode::Memory
        } else {
            PauseMode::Filesystem
        }
    });
    if !server.pausable {
        return api_error(
            StatusCode::NOT_IMPLEMENTED,
            "pausing a sandbox on the kubernetes backend needs its files on a claim of its own: start the server with --kube-pausable (and a storage class the cluster binds claims of)",
        );
    }
    match sandbox.pause(mode).await {
        Ok(true) => {
            server.registry.persist(&sandbox);
            StatusCode::NO_CONTENT.into_response()
        }
        Ok(false) => api_error(
            StatusCode::CONFLICT,
            format!("sandbox {id} is already paused"),
        ),
        Err(e @ dockhand::Error::PauseUnsupported { .. }) => {
            api_error(StatusCode::NOT_IMPLEMENTED, e.to_string())
        }
        Err(e @ dockhand::Error::InvalidTransition { .. }) => api_error(
            StatusCode::CONFLICT,
            format!("sandbox {id} is busy (a command or run is under way): {e}"),
        ),
        Err(e) => sdk_failure(format!("pausing sandbox {id}"), &e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(internet: Option<bool>, allow: &[&str], deny: &[&str]) -> CreateRequest {
        CreateRequest {
            allow_internet_access: internet,
            network: Some(NetworkRequest {
                allow_out: Some(allow.iter().map(|s| s.to_string()).collect()),
                deny_out: Some(deny.iter().map(|s| s.to_string()).collect()),
                rules: None,
                allow_public_traffic: None,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn e2b_network_options_become_egress_policies() {
        assert!(matches!(
            network_of(&request(None, &[], &[]), false),
            Ok(Network::None)
        ));
        assert!(matches!(
            network_of(&request(Some(false), &[], &[]), true),
            Ok(Network::None)
        ));
        let Ok(Network::Egress(all)) =
            network_of(&request(Some(true), &[], &["10.0.0.0/8"]), false)
        else {
            panic!("internet access makes a policy");
        };
        assert_eq!(all.allowed(), ["*"]);
        let Ok(Network::Egress(some)) =
            network_of(&request(Some(false), &["pypi.org"], &["0.0.0.0/0"]), false)
        else {
            panic!("allowOut makes a policy");
        };
        assert_eq!(some.allowed(), ["pypi.org"]);
        assert!(network_of(&request(None, &["bad host!"], &[]), false).is_err());
        let mut with_rules = request(Some(true), &[], &[]);
        if let Some(n) = with_rules.network.as_mut() {
            n.rules = Some(serde_json::json!({"api.example.com": [{"transform": {}}]}));
        }
        assert!(network_of(&with_rules, false)
            .unwrap_err()
            .contains("rules"));
    }

    #[test]
    fn timeouts_are_capped() {
        let day = Duration::from_secs(86_400);
        assert_eq!(
            seconds(None, Duration::from_secs(300), day),
            Duration::from_secs(300)
        );
        assert_eq!(
            seconds(Some(10 * 86_400), Duration::from_secs(300), day),
            day
        );
    }
}
