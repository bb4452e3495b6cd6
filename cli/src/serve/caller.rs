//! Who is asking, read from the request's headers alone: the tenant of a
//! control-plane call's `X-API-Key`, the sandbox an in-sandbox call names
//! with its token. Handlers take these as arguments before their body, so
//! no body is read, buffered or parsed for a caller who may not make the
//! call, and no handler can forget the check.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::response::Response;

use super::registry::Sandbox;
use super::Server;

/// The tenant (key index) of a control-plane call.
pub struct Tenant(pub usize);

impl FromRequestParts<Arc<Server>> for Tenant {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, server: &Arc<Server>) -> Result<Self, Response> {
        server.tenant(&parts.headers).map(Tenant)
    }
}

/// The sandbox an in-sandbox call names, its token checked.
pub struct Caller(pub Arc<Sandbox>);

impl FromRequestParts<Arc<Server>> for Caller {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, server: &Arc<Server>) -> Result<Self, Response> {
        server.sandbox(&parts.headers).map(Caller)
    }
}
