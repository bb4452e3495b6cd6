//! The routes `dockhand serve` answers, each a thin handler that names
//! who asks (a key's tenant or a sandbox's token, read from the headers
//! before any body) and hands over to the module that does the work.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use super::caller::{Caller, Tenant};
use super::control;
use super::errors::api_error;
use super::{
    connect, dashboard, files, interpreter, ports, process, snapshots, telemetry, template_build,
    template_files, templates, usage, volume_content, volumes, watch, Server, Shared,
};

/// The largest body of a call that is not an upload: JSON and Connect
/// messages are small, and a body is read only once its caller is known.
const MAX_CALL_BODY: usize = 8 << 20;

pub(super) fn router(server: Arc<Server>) -> Router {
    // Uploads stream in bounded memory and check their own limit.
    let files = Router::new()
        .route("/files", get(files_get).post(files_post))
        .route(
            "/templates/{id}/files/{hash}",
            get(template_files_link).put(template_files_upload),
        )
        .route(
            "/volumecontent/{id}/{what}",
            axum::routing::any(volume_content),
        )
        .layer(DefaultBodyLimit::disable());
    Router::new()
        .route("/sandboxes", post(create).get(list))
        .route("/v2/sandboxes", post(create).get(list))
        .route("/sandboxes/{id}", get(sandbox_get).delete(sandbox_kill))
        .route("/sandboxes/{id}/timeout", post(set_timeout))
        .route("/sandboxes/{id}/refreshes", post(refresh))
        .route("/sandboxes/{id}/connect", post(connect_sandbox))
        .route("/v2/sandboxes/{id}/connect", post(connect_sandbox))
        .route("/sandboxes/{id}/pause", post(pause))
        .route("/sandboxes/{id}/resume", post(resume))
        .route("/sandboxes/{id}/metrics", get(metrics))
        .route("/sandboxes/{id}/snapshots", post(snapshot_create))
        .route("/snapshots", get(snapshot_list))
        .route("/volumes", post(volume_create).get(volume_list))
        .route("/volumes/{id}", get(volume_get).delete(volume_delete))
        .route("/templates", get(template_list))
        .route("/v3/templates", post(template_request))
        .route("/templates/aliases/{alias}", get(template_alias))
        .route("/v2/templates/{id}/builds/{build}", post(template_start))
        .route(
            "/templates/{id}/builds/{build}/status",
            get(template_status),
        )
        .route("/templates/{id}", axum::routing::delete(template_delete))
        .route("/process.Process/{method}", post(process_rpc))
        .route("/filesystem.Filesystem/{method}", post(filesystem_rpc))
        .route("/health", get(health))
        .route("/execute", post(execute))
        .route("/contexts", get(contexts_list).post(contexts_create))
        .route("/contexts/{id}", axum::routing::delete(contexts_remove))
        .route("/contexts/{id}/restart", post(contexts_restart))
        .route("/metrics", get(metrics_scrape))
        .route("/dashboard", get(|| async { dashboard::asset("") }))
        .route(
            "/dashboard/api/sandboxes",
            get(|State(s): Shared, Tenant(tenant): Tenant| async move {
                dashboard::sandboxes(&s, tenant)
            }),
        )
        .route(
            "/dashboard/{file}",
            get(|Path(file): Path<String>| async move { dashboard::asset(&file) }),
        )
        .fallback(unknown_endpoint)
        .layer(DefaultBodyLimit::max(MAX_CALL_BODY))
        .merge(files)
        .layer(axum::middleware::from_fn_with_state(
            server.clone(),
            telemetry::observe,
        ))
        // Sandbox addresses (`<port>-<id>.<domain>`) are not the API's.
        .layer(axum::middleware::from_fn_with_state(
            server.clone(),
            ports::route,
        ))
        .layer(axum::middleware::from_fn(close_after_refusal))
        .with_state(server)
}

/// A request with a body refused (a 4xx: no key, an unknown sandbox, too
/// large) may have been answered before its body was read, and the server
/// then cannot read the next request on that connection: the answer says
/// `Connection: close`, so the client opens a new one instead of failing
/// its next request on this one.
async fn close_after_refusal(request: Request, next: axum::middleware::Next) -> Response {
    let headers = request.headers();
    let declares_body = headers.contains_key(axum::http::header::TRANSFER_ENCODING)
        || headers
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .is_some_and(|n| n > 0);
    let mut response = next.run(request).await;
    if declares_body && response.status().is_client_error() {
        response.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    response
}

async fn unknown_endpoint(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    api_error(
        StatusCode::NOT_FOUND,
        format!(
            "{method} {} is not part of the API dockhand serve answers (see docs/serve.md)",
            uri.path()
        ),
    )
}

async fn create(State(s): Shared, Tenant(tenant): Tenant, body: Bytes) -> Response {
    control::create(s.clone(), tenant, &body).await
}

async fn list(
    State(s): Shared,
    Tenant(tenant): Tenant,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    control::list(&s, tenant, &query)
}

async fn sandbox_get(State(s): Shared, Tenant(tenant): Tenant, Path(id): Path<String>) -> Response {
    control::get(&s, tenant, &id)
}

async fn sandbox_kill(
    State(s): Shared,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Response {
    control::kill(&s, tenant, &id).await
}

async fn set_timeout(
    State(s): Shared,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    control::timeout(&s, tenant, &id, &body, true)
}

async fn refresh(
    State(s): Shared,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    control::timeout(&s, tenant, &id, &body, false)
}

async fn connect_sandbox(
    State(s): Shared,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    control::connect(&s, tenant, &id, &body).await
}

async fn pause(
    State(s): Shared,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    control::pause(&s, tenant, &id, &body).await
}

async fn resume(
    State(s): Shared,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    control::resume(&s, tenant, &id, &body).await
}

async fn snapshot_create(
    State(s): Shared,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    body: Bytes,
) -> Response {
    snapshots::create(&s, tenant, &id, &body).await
}

async fn snapshot_list(
    State(s): Shared,
    Tenant(tenant): Tenant,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> Response {
    snapshots::list(&s, tenant, &query)
}

/// A snapshot's or a built template's removal (the server's own templates
/// are not removed through the API).
async fn template_delete(
    State(s): Shared,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Response {
    if s.snapshots.owned(tenant, &id).is_none() {
        if let Some(answer) = templates::delete(&s, tenant, &id).await {
            return answer;
        }
    }
    snapshots::delete(&s, tenant, &id).await
}

async fn template_list(State(s): Shared, Tenant(tenant): Tenant) -> Response {
    templates::list(&s, tenant)
}

async fn template_request(State(s): Shared, Tenant(tenant): Tenant, body: Bytes) -> Response {
    templates::request(&s, tenant, &body)
}

async fn template_alias(
    State(s): Shared,
    Tenant(tenant): Tenant,
    Path(alias): Path<String>,
) -> Response {
    templates::alias(&s, tenant, &alias)
}

async fn template_start(
    State(s): Shared,
    Tenant(tenant): Tenant,
    Path((id, build)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    match templates::start(&s, tenant, &id, &build, &body) {
        Ok((job, request, built)) => {
            tokio::spawn(template_build::run(s.clone(), job, request, built));
            StatusCode::ACCEPTED.into_response()
        }
        Err(refusal) => refusal,
    }
}

async fn template_status(
    State(s): Shared,
    Tenant(tenant): Tenant,
    Path((id, build)): Path<(String, String)>,
    uri: axum::http::Uri,
) -> Response {
    templates::status(&s, tenant, &id, &build, uri.query().unwrap_or_default())
}

async fn template_files_link(
    State(s): Shared,
    Tenant(tenant): Tenant,
    Path((id, hash)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    template_files::link(&s, tenant, &id, &hash, &headers)
}

/// The volume content API: the volume's token is the credential, checked
/// before the body is read.
async fn volume_content(
    State(s): Shared,
    Path((id, what)): Path<(String, String)>,
    request: Request,
) -> Response {
    volume_content::handle(&s, &id, &what, request).await
}

/// The upload a link allows: its token is the credential (the SDKs send
/// no API key to an upload URL).
async fn template_files_upload(
    State(s): Shared,
    Path((id, hash)): Path<(String, String)>,
    request: Request,
) -> Response {
    template_files::upload(&s, &id, &hash, request).await
}

async fn volume_create(State(s): Shared, Tenant(tenant): Tenant, body: Bytes) -> Response {
    volumes::create(&s, tenant, &body).await
}

async fn volume_list(State(s): Shared, Tenant(tenant): Tenant) -> Response {
    volumes::list(&s, tenant).await
}

async fn volume_get(State(s): Shared, Tenant(tenant): Tenant, Path(id): Path<String>) -> Response {
    volumes::get(&s, tenant, &id).await
}

async fn volume_delete(
    State(s): Shared,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Response {
    volumes::delete(&s, tenant, &id).await
}

/// `GET /metrics` on the main address: any of the server's keys, as
/// `X-API-Key` or `Authorization: Bearer` (what scrapers send).
async fn metrics_scrape(State(s): Shared, headers: HeaderMap) -> Response {
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let presented = headers
        .get("x-api-key")
        .map(|v| v.as_bytes())
        .or(bearer.map(str::as_bytes));
    if presented.and_then(|k| s.keys.tenant(k)).is_none() {
        return api_error(
            StatusCode::UNAUTHORIZED,
            "metrics need one of the server's API keys (X-API-Key or Authorization: Bearer)",
        );
    }
    open_metrics(State(s)).await
}

/// `GET /metrics` on `--metrics-listen`, which needs no key.
pub(super) async fn open_metrics(State(s): Shared) -> Response {
    // A gateway that cannot say leaves its figures as they were.
    let egress = s.client.egress_stats().await.ok().flatten();
    match s.telemetry.encode(&s, egress) {
        Ok(text) => (
            [(
                axum::http::header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(_) => api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "encoding the metrics failed",
        ),
    }
}

/// `GET /sandboxes/{id}/metrics`: the readings between `start` and `end`
/// (Unix seconds), with a fresh one when the newest is older than the
/// sampling interval.
async fn metrics(
    State(s): Shared,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    Query(query): Query<BTreeMap<String, String>>,
) -> Response {
    let Some(sandbox) = s.registry.owned(tenant, &id) else {
        return super::errors::not_found(&id);
    };
    let bound = |name: &str| match query.get(name).map(|v| v.parse::<i64>()) {
        None => Ok(None),
        Some(Ok(v)) => Ok(Some(v)),
        Some(Err(_)) => Err(api_error(
            StatusCode::BAD_REQUEST,
            format!("{name} must be Unix seconds"),
        )),
    };
    let (start, end) = match (bound("start"), bound("end")) {
        (Ok(start), Ok(end)) => (start, end),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    let stale = sandbox.usage.latest().is_none_or(|p| {
        (chrono::Utc::now() - p.at).to_std().unwrap_or_default() >= s.limits.metrics_interval
    });
    if stale && end.is_none() {
        usage::read(&sandbox.usage, &sandbox.session).await;
    }
    axum::Json(usage::as_json(&sandbox.usage.between(start, end))).into_response()
}

async fn process_rpc(
    Caller(sandbox): Caller,
    headers: HeaderMap,
    Path(method): Path<String>,
    body: Bytes,
) -> Response {
    match method.as_str() {
        "Start" => process::start(sandbox, &headers, &body).await,
        "Connect" => process::attach(&sandbox, &headers, &body),
        "List" => process::list(&sandbox),
        "SendInput" => process::send_input(&sandbox, &headers, &body).await,
        "StreamInput" => process::stream_input(&sandbox, &headers, &body).await,
        "CloseStdin" => process::close_stdin(&sandbox, &headers, &body).await,
        "SendSignal" => process::send_signal(&sandbox, &headers, &body).await,
        "Update" => process::update(&sandbox, &headers, &body).await,
        other => connect::unary_error(&connect::ConnectError::new(
            "unimplemented",
            format!("process.{other} is not supported by dockhand serve"),
        )),
    }
}

async fn filesystem_rpc(
    Caller(sandbox): Caller,
    headers: HeaderMap,
    Path(method): Path<String>,
    body: Bytes,
) -> Response {
    match method.as_str() {
        "WatchDir" => watch::stream(sandbox, &headers, &body).await,
        "CreateWatcher" | "GetWatcherEvents" | "RemoveWatcher" => {
            watch::unary(&sandbox, &method, &headers, &body).await
        }
        _ => files::unary(&sandbox, &method, &headers, &body).await,
    }
}

async fn files_get(Caller(sandbox): Caller, request: Request) -> Response {
    files::download(&sandbox, request.uri().query()).await
}

async fn files_post(State(s): Shared, Caller(sandbox): Caller, request: Request) -> Response {
    files::upload(sandbox, request, s.limits.max_upload).await
}

async fn health(State(s): Shared, headers: HeaderMap) -> Response {
    // A sandbox that is gone answers as E2B's proxy does (502), which the
    // SDKs read as "not running".
    match s.sandbox(&headers) {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(_) => api_error(StatusCode::BAD_GATEWAY, "The sandbox was not found"),
    }
}

async fn execute(State(s): Shared, Caller(sandbox): Caller, body: Bytes) -> Response {
    interpreter::execute(sandbox, &body, s.limits.run_timeout).await
}

async fn contexts_list(Caller(sandbox): Caller) -> Response {
    interpreter::list_contexts(&sandbox)
}

async fn contexts_create(Caller(sandbox): Caller, body: Bytes) -> Response {
    interpreter::create_context(&sandbox, &body).await
}

async fn contexts_remove(Caller(sandbox): Caller, Path(id): Path<String>) -> Response {
    interpreter::remove_context(&sandbox, &id).await
}

async fn contexts_restart(Caller(sandbox): Caller, Path(id): Path<String>) -> Response {
    interpreter::restart_context(&sandbox, &id).await
}
