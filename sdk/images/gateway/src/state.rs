//! The sandboxes the gateway serves, each known by the address the gateway
//! has on that sandbox's own network.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use rustls::ClientConfig;
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

use crate::policy::Policy;
use crate::secrets::Secret;
use crate::tls::{self, Authority};

/// Connections one sandbox may hold open through the gateway at once: the
/// gateway is shared, and one sandbox must not use it up.
pub const MAX_CONNECTIONS: usize = 512;

/// One sandbox: its rules, its secrets and its authority.
pub struct Sandbox {
    policy: RwLock<Arc<Policy>>,
    secrets: RwLock<Arc<Vec<Secret>>>,
    pub authority: Authority,
    dns: JoinHandle<()>,
    /// Its open connections' permits.
    pub connections: Arc<tokio::sync::Semaphore>,
}

impl Sandbox {
    pub fn policy(&self) -> Arc<Policy> {
        self.policy
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn secrets(&self) -> Arc<Vec<Secret>> {
        self.secrets
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        self.dns.abort();
    }
}

/// What the gateway has done since it started, for its owner's metrics.
#[derive(Default)]
pub struct Counts {
    /// Connections from sandboxes it took.
    pub accepted: AtomicU64,
    /// Connections closed at once: their sandbox held its share open.
    pub turned_away: AtomicU64,
    /// Requests its policy refused.
    pub denied: AtomicU64,
}

/// Everything the gateway serves.
pub struct State {
    pub counts: Counts,
    by_address: RwLock<HashMap<IpAddr, Arc<Sandbox>>>,
    by_id: RwLock<HashMap<String, IpAddr>>,
    upstream: RwLock<Arc<ClientConfig>>,
    /// The roots the gateway trusts, as PEM: the sandbox trusts them too.
    roots_pem: RwLock<String>,
}

impl State {
    pub fn new() -> State {
        let (roots, pem) = tls::roots(&[]);
        State {
            counts: Counts::default(),
            by_address: RwLock::default(),
            by_id: RwLock::default(),
            upstream: RwLock::new(tls::upstream_config(roots)),
            roots_pem: RwLock::new(pem),
        }
    }

    pub fn sandbox(&self, address: IpAddr) -> Option<Arc<Sandbox>> {
        let address = canonical(address);
        self.by_address
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&address)
            .cloned()
    }

    /// The gateway's figures: sandboxes served, connections open now, and
    /// the counts since it started.
    pub fn stats(&self) -> serde_json::Value {
        let sandboxes = self.by_address.read().unwrap_or_else(|e| e.into_inner());
        let open: usize = sandboxes
            .values()
            .map(|s| MAX_CONNECTIONS - s.connections.available_permits())
            .sum();
        let count = |c: &AtomicU64| c.load(Ordering::Relaxed);
        serde_json::json!({
            "sandboxes": sandboxes.len(),
            "open": open,
            "accepted": count(&self.counts.accepted),
            "turned_away": count(&self.counts.turned_away),
            "denied": count(&self.counts.denied),
        })
    }

    pub fn upstream_tls(&self) -> Arc<ClientConfig> {
        self.upstream
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Trusts these certificates too, beside the image's bundle.
    pub fn trust(&self, extra: &[String]) {
        let (roots, pem) = tls::roots(extra);
        *self.upstream.write().unwrap_or_else(|e| e.into_inner()) = tls::upstream_config(roots);
        *self.roots_pem.write().unwrap_or_else(|e| e.into_inner()) = pem;
    }

    /// Serves a sandbox reached at `address`, or changes its rules; returns
    /// the certificates it should trust (the gateway's roots and its own
    /// authority).
    pub async fn set(
        &self,
        key: &str,
        address: IpAddr,
        policy: Policy,
        secrets: Vec<Secret>,
    ) -> Result<String, String> {
        let address = canonical(address);
        let same = self
            .by_id
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            == Some(&address);
        if let (true, Some(existing)) = (same, self.sandbox(address)) {
            *existing.policy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
            *existing.secrets.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(secrets);
            return Ok(self.bundle(&existing));
        }
        // An address another sandbox had (its network gone, the address
        // given again): nothing of that sandbox may carry over.
        let stale = self
            .by_address
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&address);
        if let Some(stale) = stale {
            self.by_id
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|_, a| *a != address);
            drop(stale);
        }
        let mut socket = None;
        let mut last = String::new();
        // A stale sandbox's DNS task lets go of the port when it next runs.
        for _ in 0..50 {
            match UdpSocket::bind(SocketAddr::new(address, 53)).await {
                Ok(s) => {
                    socket = Some(s);
                    break;
                }
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let socket = socket.ok_or_else(|| format!("DNS on {address}: {last}"))?;
        let authority = Authority::new().map_err(|e| e.to_string())?;
        let sandbox = Arc::new_cyclic(|weak: &std::sync::Weak<Sandbox>| {
            let weak = weak.clone();
            Sandbox {
                policy: RwLock::new(Arc::new(policy)),
                secrets: RwLock::new(Arc::new(secrets)),
                authority,
                connections: Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS)),
                // Per packet it looks the sandbox up again: a dropped sandbox
                // answers nothing more.
                dns: tokio::spawn(async move { crate::serve_dns(socket, address, weak).await }),
            }
        });
        self.by_address
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(address, sandbox.clone());
        self.by_id
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_string(), address);
        Ok(self.bundle(&sandbox))
    }

    fn bundle(&self, sandbox: &Sandbox) -> String {
        let mut pem = self
            .roots_pem
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if !pem.is_empty() && !pem.ends_with('\n') {
            pem.push('\n');
        }
        pem.push_str(&sandbox.authority.cert_pem);
        pem
    }

    /// Stops serving a sandbox.
    pub fn drop_sandbox(&self, key: &str) {
        let address = self
            .by_id
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        if let Some(address) = address {
            self.by_address
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&address);
        }
    }
}

/// IPv4 addresses seen through an IPv6 socket look like `::ffff:a.b.c.d`.
fn canonical(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        v4 => v4,
    }
}
