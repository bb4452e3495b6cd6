//! The operator's page at `/dashboard`: a key's sandboxes with their
//! template, state, age, time left, CPU and memory over time and the
//! commands they ran, with kill, pause, resume and extend buttons. The
//! page and its script are served from the binary (no CDN); its data
//! comes from `/dashboard/api/sandboxes` and its buttons call the API's
//! own routes, each with the key the operator typed in.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::usage;
use super::Server;

const INDEX: &str = include_str!("dashboard/index.html");
const SCRIPT: &str = include_str!("dashboard/app.js");
const STYLE: &str = include_str!("dashboard/style.css");
const ICON: &str = include_str!("dashboard/icon.svg");

/// Readings each sandbox's lines show: the last ten minutes at the
/// default interval.
const SHOWN_READINGS: usize = 120;

/// Only the page's own files run or load; it cannot be framed.
const POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; \
     frame-ancestors 'none'";

/// One of the page's files, by name (`""` is the page).
pub fn asset(name: &str) -> Response {
    let (body, kind) = match name {
        "" | "index.html" => (INDEX, "text/html; charset=utf-8"),
        "app.js" => (SCRIPT, "text/javascript; charset=utf-8"),
        "style.css" => (STYLE, "text/css; charset=utf-8"),
        "icon.svg" => (ICON, "image/svg+xml"),
        _ => {
            return super::errors::api_error(
                StatusCode::NOT_FOUND,
                format!("the dashboard has no file {name:?}"),
            )
        }
    };
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `GET /dashboard/api/sandboxes`: the key's sandboxes as the page shows
/// them.
pub fn sandboxes(server: &Server, tenant: usize) -> Response {
    let list: Vec<Value> = server
        .registry
        .of(tenant)
        .iter()
        .map(|s| {
            let shown = s.usage.last(SHOWN_READINGS);
            json!({
                "sandboxID": s.id,
                "templateID": s.template,
                "state": s.state_name(),
                "startedAt": s.started_at.to_rfc3339(),
                "endAt": s.end_at().to_rfc3339(),
                "metadata": s.metadata,
                "internet": s.internet,
                "metrics": usage::as_json(&shown),
                "commands": s.processes.ran(),
            })
        })
        .collect();
    let mut response = axum::Json(list).into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
