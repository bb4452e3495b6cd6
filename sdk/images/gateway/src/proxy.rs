//! What the sandbox's connections to the gateway become: an HTTP proxy
//! (port 3128: absolute URLs and CONNECT), and transparent interception of
//! names the gateway's DNS resolved to itself (port 80 by the Host header,
//! port 443 by the TLS server name). A request the policy does not allow
//! gets 403 with the reason, or its connection closed where no HTTP is
//! spoken; TLS to a host with secrets is terminated with the sandbox's own
//! authority so that the placeholders can be swapped.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper::header::{
    HeaderValue, ACCEPT_ENCODING, CONNECTION, CONTENT_ENCODING, CONTENT_LENGTH, HOST,
    TRANSFER_ENCODING, UPGRADE,
};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

use crate::policy::Target;
use crate::prefixed::Prefixed;
use crate::redact;
use crate::secrets;
use crate::state::{Sandbox, State};
use crate::tls::{self, Hello};
use crate::upstream::{self, Body};

/// How long a client may take to send its TLS ClientHello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// The most of a ClientHello read before giving up on it.
const MAX_HELLO: usize = 16 * 1024;

/// Which of the gateway's listeners a connection came in on.
#[derive(Clone, Copy)]
pub enum Listener {
    Proxy,
    Http,
    Tls,
}

/// Accepts connections for ever, each handled on its own task.
pub async fn serve(listener: TcpListener, kind: Listener, state: Arc<State>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let _ = stream.set_nodelay(true);
            // The address the sandbox reached says which sandbox it is: each
            // sandbox's network gives the gateway an address of its own.
            let Some(sandbox) = stream.local_addr().ok().and_then(|a| state.sandbox(a.ip())) else {
                return;
            };
            // Past its share, a sandbox's new connection is closed at once;
            // the others' go on.
            let Ok(_permit) = sandbox.connections.clone().try_acquire_owned() else {
                state.counts.turned_away.fetch_add(1, Ordering::Relaxed);
                return;
            };
            state.counts.accepted.fetch_add(1, Ordering::Relaxed);
            match kind {
                Listener::Proxy => serve_http(stream, sandbox, state, None).await,
                Listener::Http => {
                    let port = stream.local_addr().map_or(80, |a| a.port());
                    serve_http(stream, sandbox, state, Some(Origin::Host { port })).await
                }
                Listener::Tls => intercept_tls(stream, sandbox, state).await,
            }
        });
    }
}

/// Where the requests on a connection go when they do not say it themselves.
#[derive(Clone)]
enum Origin {
    /// To the Host header's host, at this port, in plain HTTP.
    Host { port: u16 },
    /// To this host over TLS (the connection's TLS was terminated here).
    Tls { host: String, port: u16 },
}

type Senders = Arc<Mutex<HashMap<(String, u16, bool), SendRequest<Incoming>>>>;

async fn serve_http<S>(stream: S, sandbox: Arc<Sandbox>, state: Arc<State>, origin: Option<Origin>)
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let senders: Senders = Arc::default();
    let service = service_fn(move |req| {
        let (sandbox, state, origin, senders) = (
            sandbox.clone(),
            state.clone(),
            origin.clone(),
            senders.clone(),
        );
        async move { Ok::<_, hyper::Error>(handle(req, sandbox, state, origin, senders).await) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await;
}

async fn handle(
    req: Request<Incoming>,
    sandbox: Arc<Sandbox>,
    state: Arc<State>,
    origin: Option<Origin>,
    senders: Senders,
) -> Response<Body> {
    if req.method() == Method::CONNECT {
        return connect(req, sandbox, state).await;
    }
    let (host, port, tls) = match &origin {
        Some(Origin::Tls { host, port }) => (host.clone(), *port, true),
        Some(Origin::Host { port }) => match host_header(&req) {
            Some((h, p)) => (h, p.unwrap_or(*port), false),
            None => return refuse(StatusCode::BAD_REQUEST, "the request has no Host header"),
        },
        None => match (req.uri().scheme_str(), req.uri().host()) {
            (Some("http"), Some(h)) => (h.to_string(), req.uri().port_u16().unwrap_or(80), false),
            _ => {
                return refuse(
                    StatusCode::BAD_REQUEST,
                    "the proxy takes http:// URLs and CONNECT (https goes through CONNECT)",
                )
            }
        },
    };
    let target = Target::parse(&host);
    if !sandbox.policy().allows(&target, port) {
        state.counts.denied.fetch_add(1, Ordering::Relaxed);
        return denied(&host, port);
    }
    forward(req, &host, port, tls, &sandbox, &state, &senders).await
}

async fn forward(
    req: Request<Incoming>,
    host: &str,
    port: u16,
    tls: bool,
    sandbox: &Sandbox,
    state: &State,
    senders: &Senders,
) -> Response<Body> {
    let mut req = req;
    let upgrading = is_upgrade(req.headers());
    // The sandbox's side of an upgraded connection (a WebSocket), taken
    // before the request is sent on.
    let downstream = upgrading.then(|| hyper::upgrade::on(&mut req));
    let (mut parts, body) = req.into_parts();
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    parts.uri = path
        .parse::<Uri>()
        .unwrap_or_else(|_| Uri::from_static("/"));
    parts.headers.remove("proxy-authorization");
    parts.headers.remove("proxy-connection");
    if !parts.headers.contains_key(HOST) {
        let value = if (port == 80 && !tls) || (port == 443 && tls) {
            host.to_string()
        } else {
            format!("{host}:{port}")
        };
        if let Ok(v) = HeaderValue::from_str(&value) {
            parts.headers.insert(HOST, v);
        }
    }
    let policy = sandbox.policy();
    let bound = sandbox.secrets();
    let target = Target::parse(host);
    secrets::substitute(&mut parts.headers, &bound, &target, port);
    let swaps = secrets::swaps_for(&bound, &target, port);
    if swaps.is_some() && upgrading {
        // What crosses an upgraded connection is no HTTP the gateway could
        // take the secrets' values out of: refused before any 101.
        return refuse(
            StatusCode::FORBIDDEN,
            &format!(
                "dockhand egress gateway: {host} is bound to secrets, and an upgraded \
                 connection (a WebSocket) to it could not have their values taken out of \
                 its answers; use plain HTTP requests to it"
            ),
        );
    }
    if swaps.is_some() {
        // A compressed answer could not be searched for the values.
        parts
            .headers
            .insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    }
    let key = (host.to_string(), port, tls);
    let mut reused = senders.lock().await.remove(&key);
    if let Some(s) = &mut reused {
        if s.ready().await.is_err() {
            reused = None;
        }
    }
    let mut sender = match reused {
        Some(s) => s,
        None => {
            let tls = tls.then(|| state.upstream_tls());
            match upstream::http(host, port, tls, &policy).await {
                Ok(s) => s,
                Err(e) => {
                    return refuse(
                        StatusCode::BAD_GATEWAY,
                        &format!("dockhand egress gateway: {e}"),
                    )
                }
            }
        }
    };
    let answer = sender.send_request(Request::from_parts(parts, body)).await;
    senders.lock().await.insert(key, sender);
    match (answer, swaps) {
        (Ok(mut response), None) if response.status() == StatusCode::SWITCHING_PROTOCOLS => {
            // Both sides switched: the bytes are carried as they are.
            let upstream = hyper::upgrade::on(&mut response);
            if let Some(downstream) = downstream {
                tokio::spawn(async move {
                    if let (Ok(up), Ok(down)) = tokio::join!(upstream, downstream) {
                        splice(TokioIo::new(down), TokioIo::new(up)).await;
                    }
                });
            }
            response.map(|b| b.boxed())
        }
        (Ok(response), None) => response.map(|b| b.boxed()),
        (Ok(response), Some(swaps)) => redacted(response, swaps, host),
        (Err(e), _) => refuse(
            StatusCode::BAD_GATEWAY,
            &format!("dockhand egress gateway: {host}: {e}"),
        ),
    }
}

/// A bound host's answer with its secrets' values swapped for their
/// placeholders, in headers and body. An answer in an encoding the gateway
/// did not ask for cannot be searched: it is refused, not passed on.
fn redacted(response: Response<Incoming>, swaps: redact::Swaps, host: &str) -> Response<Body> {
    let (mut parts, body) = response.into_parts();
    if let Some(encoding) = unsearchable_framing(&parts.headers) {
        return refuse(
            StatusCode::BAD_GATEWAY,
            &format!(
                "dockhand egress gateway: {host} answered in the {encoding} encoding \
                 (identity was asked for); the answer is not passed on because the \
                 secrets sent to it could not be taken out of it"
            ),
        );
    }
    swaps.headers(&mut parts.headers);
    parts.headers.remove(CONTENT_LENGTH);
    Response::from_parts(parts, redact::RedactedBody::new(body, swaps).boxed())
}

/// The first coding of an answer's body that is not the bytes as they are,
/// in any of its `Content-Encoding` fields (each may list several) or its
/// `Transfer-Encoding` fields beyond `chunked` (which hyper undoes): such a
/// body cannot be searched for the secrets' values.
fn unsearchable_framing(headers: &hyper::HeaderMap) -> Option<String> {
    let codings = |name| {
        headers
            .get_all(name)
            .iter()
            .flat_map(|v| {
                String::from_utf8_lossy(v.as_bytes())
                    .split(',')
                    .map(|c| c.trim().to_ascii_lowercase())
                    .collect::<Vec<_>>()
            })
            .filter(|c| !c.is_empty() && c != "identity")
            .collect::<Vec<_>>()
    };
    codings(CONTENT_ENCODING).into_iter().next().or_else(|| {
        codings(TRANSFER_ENCODING)
            .into_iter()
            .find(|c| c != "chunked")
    })
}

/// Whether a request asks to switch protocols (a WebSocket's handshake).
fn is_upgrade(headers: &hyper::HeaderMap) -> bool {
    headers.contains_key(UPGRADE)
        && headers.get_all(CONNECTION).iter().any(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
        })
}

/// CONNECT: a tunnel to an allowed host, or TLS terminated here when the
/// host has secrets.
async fn connect(
    req: Request<Incoming>,
    sandbox: Arc<Sandbox>,
    state: Arc<State>,
) -> Response<Body> {
    let Some(authority) = req.uri().authority().cloned() else {
        return refuse(StatusCode::BAD_REQUEST, "CONNECT needs host:port");
    };
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = authority.port_u16().unwrap_or(443);
    let target = Target::parse(&host);
    if !sandbox.policy().allows(&target, port) {
        state.counts.denied.fetch_add(1, Ordering::Relaxed);
        return denied(&host, port);
    }
    // The tunnel outlives the request's connection: it holds a share of
    // its own.
    let Ok(permit) = sandbox.connections.clone().try_acquire_owned() else {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "dockhand egress gateway: this sandbox has too many connections open",
        );
    };
    if secrets::any_for(&sandbox.secrets(), &target, port) {
        tokio::spawn(async move {
            let _permit = permit;
            if let Ok(upgraded) = hyper::upgrade::on(req).await {
                terminate(TokioIo::new(upgraded), host, port, sandbox, state).await;
            }
        });
        return empty(StatusCode::OK);
    }
    let upstream = match upstream::connect(&host, port, &sandbox.policy()).await {
        Ok(s) => s,
        Err(e) => {
            return refuse(
                StatusCode::BAD_GATEWAY,
                &format!("dockhand egress gateway: {e}"),
            )
        }
    };
    tokio::spawn(async move {
        let _permit = permit;
        if let Ok(upgraded) = hyper::upgrade::on(req).await {
            splice(TokioIo::new(upgraded), upstream).await;
        }
    });
    empty(StatusCode::OK)
}

/// Port 443: reads the ClientHello for the server name, then passes the
/// connection through, or terminates it when the host has secrets.
async fn intercept_tls(mut stream: TcpStream, sandbox: Arc<Sandbox>, state: Arc<State>) {
    let port = stream.local_addr().map_or(443, |a| a.port());
    let mut received = Vec::new();
    let host = loop {
        let mut chunk = [0u8; 4096];
        let read = tokio::time::timeout(HELLO_TIMEOUT, stream.read(&mut chunk)).await;
        let Ok(Ok(n)) = read else { return };
        if n == 0 {
            return;
        }
        received.extend_from_slice(&chunk[..n]);
        match tls::server_name(&received) {
            Hello::Incomplete if received.len() < MAX_HELLO => continue,
            Hello::Server(Some(name)) => break name,
            _ => return,
        }
    };
    let target = Target::parse(&host);
    if !sandbox.policy().allows(&target, port) {
        return;
    }
    let stream = Prefixed::new(received, stream);
    if secrets::any_for(&sandbox.secrets(), &target, port) {
        terminate(stream, host, port, sandbox, state).await;
        return;
    }
    if let Ok(upstream) = upstream::connect(&host, port, &sandbox.policy()).await {
        splice(stream, upstream).await;
    }
}

/// Terminates the sandbox's TLS with a certificate from its own authority
/// and serves its requests, forwarded over the gateway's own TLS.
fn terminate<S>(
    stream: S,
    host: String,
    port: u16,
    sandbox: Arc<Sandbox>,
    state: Arc<State>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
where
    S: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    // Boxed with its `Send` spelled out: a CONNECT served inside a
    // terminated connection comes back here, and the compiler cannot see
    // through that cycle.
    Box::pin(async move {
        let Ok(config) = sandbox.authority.server_config(&host) else {
            return;
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let accepted = tokio::time::timeout(HELLO_TIMEOUT, acceptor.accept(stream)).await;
        let Ok(Ok(tls)) = accepted else { return };
        serve_http(tls, sandbox, state, Some(Origin::Tls { host, port })).await;
    })
}

async fn splice<A, B>(mut a: A, mut b: B)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let _ = tokio::io::copy_bidirectional(&mut a, &mut b).await;
}

fn host_header(req: &Request<Incoming>) -> Option<(String, Option<u16>)> {
    let value = req.headers().get(HOST)?.to_str().ok()?;
    let authority: hyper::http::uri::Authority = value.parse().ok()?;
    let host = authority
        .host()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    Some((host, authority.port_u16()))
}

fn denied(host: &str, port: u16) -> Response<Body> {
    let mut response = refuse(
        StatusCode::FORBIDDEN,
        &format!("dockhand egress gateway: {host}:{port} is not allowed by this sandbox's network policy"),
    );
    response
        .headers_mut()
        .insert("x-dockhand-egress", HeaderValue::from_static("denied"));
    response
}

fn refuse(status: StatusCode, message: &str) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::from(format!("{message}\n")))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn empty(status: StatusCode) -> Response<Body> {
    let mut response = Response::new(
        Full::new(Bytes::new())
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response
}

/// Binds a listener on every address (the sandbox's networks come and go).
pub async fn bind(port: u16) -> std::io::Result<TcpListener> {
    TcpListener::bind(SocketAddr::from(([0, 0, 0, 0], port))).await
}

#[cfg(test)]
mod tests {
    use hyper::header::HeaderValue;
    use hyper::HeaderMap;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn every_coding_of_an_answer_is_seen() {
        for (answer, refused) in [
            (vec![], None),
            (vec![("content-encoding", "identity")], None),
            (vec![("transfer-encoding", "chunked")], None),
            (vec![("content-encoding", "gzip")], Some("gzip")),
            (
                vec![
                    ("content-encoding", "identity"),
                    ("content-encoding", "gzip"),
                ],
                Some("gzip"),
            ),
            (vec![("content-encoding", "identity, br")], Some("br")),
            (vec![("transfer-encoding", "gzip, chunked")], Some("gzip")),
            (
                vec![
                    ("transfer-encoding", "chunked"),
                    ("transfer-encoding", "deflate"),
                ],
                Some("deflate"),
            ),
        ] {
            assert_eq!(
                super::unsearchable_framing(&headers(&answer)).as_deref(),
                refused,
                "{answer:?}"
            );
        }
    }

    #[test]
    fn upgrades_are_told_by_both_headers() {
        assert!(super::is_upgrade(&headers(&[
            ("upgrade", "websocket"),
            ("connection", "keep-alive, Upgrade")
        ])));
        assert!(!super::is_upgrade(&headers(&[("upgrade", "websocket")])));
        assert!(!super::is_upgrade(&headers(&[("connection", "upgrade")])));
    }
}
