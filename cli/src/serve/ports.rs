//! Ports inside sandboxes, reached at E2B's `get_host(port)` addresses:
//! a request whose Host is `<port>-<sandbox id>.<domain>` goes to that port
//! in the sandbox, over its session agent's channel (the sandbox needs no
//! network), HTTP and WebSocket alike.
//!
//! Who asks is checked before anything is read or forwarded: the sandbox's
//! traffic token (`e2b-traffic-access-token`) is required unless it was
//! created with `network.allowPublicTraffic`. The token is not passed on.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode, Uri, Version};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::TokioIo;

use super::config::same_secret;
use super::errors::api_error;
use super::registry::Sandbox;
use super::Shared;

/// The header that carries a sandbox's traffic token.
pub const TRAFFIC_TOKEN: &str = "e2b-traffic-access-token";
/// envd's own port: its address is the server's API, not a port inside.
const ENVD_PORT: u16 = 49983;

/// The port and sandbox id a Host names, if it is a sandbox address under
/// `domain` (any domain when none is set).
pub fn sandbox_address<'a>(host: &'a str, domain: Option<&str>) -> Option<(u16, &'a str)> {
    let host = host.trim_end_matches('.');
    // A Host may carry the server's own port.
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    let (first, rest) = name.split_once('.')?;
    if let Some(domain) = domain {
        if !rest.eq_ignore_ascii_case(domain) {
            return None;
        }
    }
    let (port, id) = first.split_once('-')?;
    let port: u16 = port.parse().ok().filter(|p| *p > 0)?;
    let id_ok = !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric());
    id_ok.then_some((port, id))
}

/// A layer before every route: sandbox addresses are proxied, the rest
/// goes on to the API.
pub async fn route(State(server): Shared, request: Request, next: Next) -> Response {
    // Every API request passes here: nothing is copied unless it names a
    // port inside a sandbox.
    let target = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()))
        .and_then(|host| sandbox_address(host, server.limits.domain.as_deref()))
        .filter(|(port, _)| *port != ENVD_PORT)
        .map(|(port, id)| (port, id.to_string()));
    let Some((port, id)) = target else {
        return next.run(request).await;
    };
    let Some(sandbox) = server.registry.get(&id) else {
        return not_found(&id);
    };
    if !sandbox.public {
        let token = request
            .headers()
            .get(TRAFFIC_TOKEN)
            .and_then(|t| t.to_str().ok());
        if !token.is_some_and(|t| same_secret(t, &sandbox.traffic_token)) {
            // A wrong token reads as no sandbox: an id gives nothing away.
            return not_found(&id);
        }
    }
    if let Err(refused) = super::caller::awake(&server, &sandbox).await {
        return refused;
    }
    proxy(sandbox, port, request).await
}

fn not_found(id: &str) -> Response {
    api_error(
        StatusCode::NOT_FOUND,
        format!(
            "The sandbox {id} was not found, or this request lacks its traffic token ({TRAFFIC_TOKEN})"
        ),
    )
}

/// Forwards one request (and, for a WebSocket or another upgrade, the
/// connection after it) to `port` in the sandbox.
async fn proxy(sandbox: Arc<Sandbox>, port: u16, mut request: Request) -> Response {
    if sandbox.is_paused() {
        if let Err(e) = sandbox.resume().await {
            return api_error(
                StatusCode::BAD_GATEWAY,
                format!("resuming the sandbox: {e}"),
            );
        }
    }
    let stream = match sandbox.session.connect(port).await {
        Ok(stream) => stream,
        Err(dockhand::Error::PortUnreachable { message, .. }) => {
            return api_error(StatusCode::BAD_GATEWAY, message)
        }
        Err(e) => return api_error(StatusCode::BAD_GATEWAY, e.to_string()),
    };
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(stream)).await {
            Ok(pair) => pair,
            Err(e) => return api_error(StatusCode::BAD_GATEWAY, e.to_string()),
        };
    tokio::spawn(connection.with_upgrades());
    let upgrading = request.headers().contains_key(header::UPGRADE);
    let from_client = upgrading.then(|| hyper::upgrade::on(&mut request));
    request.headers_mut().remove(TRAFFIC_TOKEN);
    // The server inside sees an HTTP/1.1 request in origin form, whatever
    // the client spoke (HTTP/2 has no Host header: it is made from
    // :authority).
    if let Some(authority) = request.uri().authority().cloned() {
        if let Ok(value) = HeaderValue::from_str(authority.as_str()) {
            request.headers_mut().entry(header::HOST).or_insert(value);
        }
    }
    let path = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    *request.uri_mut() = path.parse().unwrap_or_else(|_| Uri::from_static("/"));
    *request.version_mut() = Version::HTTP_11;
    let mut response = match sender.send_request(request).await {
        Ok(response) => response,
        Err(e) => {
            return api_error(
                StatusCode::BAD_GATEWAY,
                format!("port {port} in the sandbox did not answer: {e}"),
            )
        }
    };
    if response.status() == StatusCode::SWITCHING_PROTOCOLS {
        if let Some(from_client) = from_client {
            let from_server = hyper::upgrade::on(&mut response);
            tokio::spawn(async move {
                let (Ok(client), Ok(server)) = tokio::join!(from_client, from_server) else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(
                    &mut TokioIo::new(client),
                    &mut TokioIo::new(server),
                )
                .await;
            });
        }
    }
    response.map(Body::new).into_response()
}

#[cfg(test)]
mod tests {
    use super::sandbox_address;

    #[test]
    fn sandbox_addresses_are_told_from_the_api() {
        assert_eq!(
            sandbox_address("8000-abc123.localhost:3000", None),
            Some((8000, "abc123"))
        );
        assert_eq!(
            sandbox_address("8000-abc123.sb.example.com", Some("sb.example.com")),
            Some((8000, "abc123"))
        );
        assert_eq!(
            sandbox_address("8000-abc123.other.example", Some("sb.example.com")),
            None
        );
        for api in [
            "127.0.0.1:3000",
            "localhost:3000",
            "api.example.com",
            "0-abc.localhost",
            "70000-abc.localhost",
            "8000-.localhost",
            "8000-a/b.localhost",
            "x-abc.localhost",
        ] {
            assert_eq!(sandbox_address(api, None), None, "{api}");
        }
    }
}
