//! The gateway's own connections out: resolve, check the addresses the
//! name resolved to against the policy, connect (with a deadline), and
//! speak TLS when the sandbox's own TLS was terminated here.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use tokio::net::TcpStream;

use crate::policy::{Policy, Target};

/// How long a connection out may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

pub type Body = BoxBody<Bytes, hyper::Error>;

/// How long a name's addresses are used before it is resolved again.
const RESOLVED_FOR: Duration = Duration::from_secs(10);
/// Names remembered at most.
const MAX_RESOLVED: usize = 1024;

type Resolved = HashMap<String, (Instant, Vec<IpAddr>)>;

/// A name's addresses, from a short-lived cache: a server that closes each
/// connection would otherwise cost a lookup per request.
async fn resolve(name: &str) -> Result<Vec<IpAddr>, String> {
    static CACHE: OnceLock<Mutex<Resolved>> = OnceLock::new();
    let cache = CACHE.get_or_init(Mutex::default);
    if let Some((at, addrs)) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(name) {
        if at.elapsed() < RESOLVED_FOR {
            return Ok(addrs.clone());
        }
    }
    let addrs: Vec<IpAddr> =
        tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::lookup_host((name, 0)))
            .await
            .map_err(|_| format!("resolving {name} timed out"))?
            .map_err(|e| format!("resolving {name}: {e}"))?
            .map(|a| a.ip())
            .collect();
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    if cache.len() >= MAX_RESOLVED {
        cache.clear();
    }
    cache.insert(name.to_string(), (Instant::now(), addrs.clone()));
    Ok(addrs)
}

/// Connects to `host:port` for a sandbox with `policy`: the first resolved
/// address the policy does not deny.
pub async fn connect(host: &str, port: u16, policy: &Policy) -> Result<TcpStream, String> {
    let addrs: Vec<SocketAddr> = match Target::parse(host) {
        Target::Ip(ip) => vec![SocketAddr::new(ip, port)],
        Target::Name(name) => resolve(&name)
            .await?
            .into_iter()
            .map(|ip| SocketAddr::new(ip, port))
            .collect(),
    };
    let allowed: Vec<SocketAddr> = addrs
        .into_iter()
        .filter(|a| policy.allows_address(a.ip(), port))
        .collect();
    if allowed.is_empty() {
        return Err(format!("{host} resolves to no address the policy allows"));
    }
    let mut last = String::new();
    for addr in allowed {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => last = format!("connecting to {host}:{port}: {e}"),
            Err(_) => last = format!("connecting to {host}:{port} timed out"),
        }
    }
    Err(last)
}

/// An HTTP/1.1 connection to `host:port`, over TLS when `tls` is set.
pub async fn http(
    host: &str,
    port: u16,
    tls: Option<Arc<ClientConfig>>,
    policy: &Policy,
) -> Result<SendRequest<Incoming>, String> {
    let stream = connect(host, port, policy).await?;
    match tls {
        None => handshake(stream).await,
        Some(config) => {
            let name = rustls::pki_types::ServerName::try_from(
                host.trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_string(),
            )
            .map_err(|e| format!("{host}: {e}"))?;
            let stream = tokio::time::timeout(
                CONNECT_TIMEOUT,
                tokio_rustls::TlsConnector::from(config).connect(name, stream),
            )
            .await
            .map_err(|_| format!("TLS with {host} timed out"))?
            .map_err(|e| format!("TLS with {host}: {e}"))?;
            handshake(stream).await
        }
    }
}

async fn handshake<S>(stream: S) -> Result<SendRequest<Incoming>, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    // With upgrades: a connection that switches protocols (a WebSocket)
    // is handed over, not closed.
    tokio::spawn(async move {
        let _ = connection.with_upgrades().await;
    });
    Ok(sender)
}
