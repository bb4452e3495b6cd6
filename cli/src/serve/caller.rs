//! Who is asking, read from the request's headers alone: the tenant of a
//! control-plane call's `X-API-Key`, the sandbox an in-sandbox call names
//! with its token. Handlers take these as arguments before their body, so
//! no body is read, buffered or parsed for a caller who may not make the
//! call, and no handler can forget the check.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::Response;

use super::errors::api_error;
use super::registry::Sandbox;
use super::telemetry::KeyTenant;
use super::Server;

/// The tenant (key index) of a control-plane call.
pub struct Tenant(pub usize);

impl FromRequestParts<Arc<Server>> for Tenant {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, server: &Arc<Server>) -> Result<Self, Response> {
        match parts.extensions.get::<KeyTenant>() {
            Some(KeyTenant(found)) => Server::known_tenant(*found).map(Tenant),
            None => server.tenant(&parts.headers).map(Tenant),
        }
    }
}

/// The sandbox an in-sandbox call names, its token checked.
pub struct Caller(pub Arc<Sandbox>);

impl FromRequestParts<Arc<Server>> for Caller {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, server: &Arc<Server>) -> Result<Self, Response> {
        let sandbox = server.sandbox(&parts.headers)?;
        awake(server, &sandbox).await?;
        Ok(Caller(sandbox))
    }
}

/// A paused sandbox answers only once resumed: at once when it resumes on
/// activity, otherwise after `connect`.
pub async fn awake(server: &Server, sandbox: &Sandbox) -> Result<(), Response> {
    if !sandbox.is_paused() {
        return Ok(());
    }
    if !sandbox.auto_resume {
        return Err(api_error(
            StatusCode::CONFLICT,
            format!("sandbox {} is paused; connect() resumes it", sandbox.id),
        ));
    }
    match sandbox.resume().await {
        Ok(_) => {
            sandbox.set_timeout(server.limits.default_timeout);
            server.registry.persist(sandbox);
            Ok(())
        }
        Err(e) => Err(api_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("resuming sandbox {}: {e}", sandbox.id),
        )),
    }
}
