//! One sandbox's way out: its own internal network, the gateway attached
//! to it, its policy and secrets registered with the gateway, and what its
//! container is given (network, DNS, proxy variables, trust store,
//! placeholders). Dropping the lease removes the network, whatever happened.

use std::net::IpAddr;
use std::sync::Arc;

use serde_json::json;

use super::gateway::Gateway;
use super::rules::Rule;
use super::{Egress, PROXY_PORT};
use crate::archive::{build_tar, TarFile};
use crate::client::Client;
use crate::engine::{ContainerSpec, Engine};
use crate::error::{Error, Result};

/// Where the sandbox finds the certificates to trust (a scratch volume:
/// the root is read-only).
pub const CA_DIR: &str = "/run/dockhand-egress";
const CA_FILE: &str = "ca.pem";

/// A secret bound to hosts, its value read.
#[derive(Clone)]
pub(crate) struct HostSecret {
    pub name: String,
    pub value: String,
    pub hosts: Vec<String>,
}

impl std::fmt::Debug for HostSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostSecret")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .finish_non_exhaustive()
    }
}

/// A sandbox's registration with the gateway; see the module's text.
pub(crate) struct Lease {
    gateway: Arc<Gateway>,
    engine: Engine,
    network: String,
    address: IpAddr,
    key: String,
    bundle: String,
    /// (secret name, placeholder), in the secrets' order.
    placeholders: Vec<(String, String)>,
    closed: bool,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease")
            .field("network", &self.network)
            .field("gateway", &self.address)
            .finish_non_exhaustive()
    }
}

impl Lease {
    /// Makes the sandbox's network, attaches the gateway and registers the
    /// policy and secrets.
    pub async fn open(client: &Client, policy: &Egress, secrets: Vec<HostSecret>) -> Result<Lease> {
        let body = policy.to_json()?;
        let engine = client.engine();
        let gateway = client.gateways().get(engine, client.reporter()).await?;
        let key = uuid::Uuid::new_v4().simple().to_string();
        let super::spares::Spare { network, address } = gateway.spares().take(&gateway).await?;
        // Until the lease exists, a failure (or a dropped call) removes it.
        let pending = Pending {
            engine: engine.clone(),
            network: Some(network.clone()),
            gateway: gateway.container_id().to_string(),
        };
        let placeholders: Vec<(String, String)> = secrets
            .iter()
            .map(|s| {
                let random = uuid::Uuid::new_v4().simple().to_string();
                (s.name.clone(), format!("dockhand-placeholder-{random}"))
            })
            .collect();
        let answer = gateway
            .request(json!({
                "op": "set",
                "key": key,
                "address": address.to_string(),
                "policy": body,
                "secrets": secrets_json(&secrets, &placeholders)?,
            }))
            .await?;
        let bundle = answer["bundle"].as_str().unwrap_or_default().to_string();
        pending.keep();
        Ok(Lease {
            gateway,
            engine: engine.clone(),
            network,
            address,
            key,
            bundle,
            placeholders,
            closed: false,
        })
    }

    /// Gives the container its network, DNS, proxy, trust store and
    /// placeholders (the real values stay with the gateway).
    pub fn apply(&self, spec: &mut ContainerSpec) {
        spec.network = Some(self.network.clone());
        spec.dns = vec![self.address.to_string()];
        let proxy = format!("http://{}:{PROXY_PORT}", self.address);
        for name in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
            spec.env.push(format!("{name}={proxy}"));
        }
        spec.env.push("NO_PROXY=localhost,127.0.0.1,::1".into());
        spec.env.push("no_proxy=localhost,127.0.0.1,::1".into());
        let ca = format!("{CA_DIR}/{CA_FILE}");
        for name in [
            "SSL_CERT_FILE",
            "REQUESTS_CA_BUNDLE",
            "CURL_CA_BUNDLE",
            "PIP_CERT",
            "NODE_EXTRA_CA_CERTS",
            "GIT_SSL_CAINFO",
        ] {
            spec.env.push(format!("{name}={ca}"));
        }
        spec.scratch_volumes.push(CA_DIR.to_string());
        for (name, placeholder) in &self.placeholders {
            spec.env.retain(|e| !e.starts_with(&format!("{name}=")));
            spec.env.push(format!("{name}={placeholder}"));
        }
    }

    /// The placeholder the sandbox holds for secret `name`.
    pub fn placeholder(&self, name: &str) -> Option<&str> {
        self.placeholders
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p.as_str())
    }

    /// Puts the trust store into a created container (before its start).
    pub async fn install(&self, engine: &Engine, container: &str) -> Result<()> {
        let file = TarFile::new(CA_FILE.to_string(), self.bundle.as_bytes().to_vec());
        let tar = build_tar(&[], &[file])?;
        engine.upload_archive(container, CA_DIR, tar.into()).await
    }

    /// Changes the policy (and secrets) while the sandbox runs: the next
    /// connection and the next DNS answer follow it.
    pub async fn update(&mut self, policy: &Egress, secrets: Vec<HostSecret>) -> Result<()> {
        let body = policy.to_json()?;
        for secret in &secrets {
            if self.placeholder(&secret.name).is_none() {
                return Err(Error::spec(
                    "secret",
                    format!(
                        "secret `{}` was not given when the sandbox started, so it holds no placeholder for it",
                        secret.name
                    ),
                ));
            }
        }
        let placeholders: Vec<(String, String)> = secrets
            .iter()
            .filter_map(|s| Some((s.name.clone(), self.placeholder(&s.name)?.to_string())))
            .collect();
        self.gateway
            .request(json!({
                "op": "set",
                "key": self.key,
                "address": self.address.to_string(),
                "policy": body,
                "secrets": secrets_json(&secrets, &placeholders)?,
            }))
            .await
            .map(drop)
    }

    /// Unregisters the sandbox and removes its network (its container
    /// must be gone, or going).
    pub async fn close(mut self) {
        self.closed = true;
        let _ = self
            .gateway
            .request(json!({"op": "drop", "key": self.key}))
            .await;
        let _ = self
            .engine
            .disconnect_network(&self.network, self.gateway.container_id())
            .await;
        if self.engine.remove_network(&self.network).await.is_err() {
            self.engine
                .remove_network_in_background(self.network.clone(), None);
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        // A dropped run: the gateway forgets the sandbox when told (if a
        // runtime is there to tell it) or when it exits; the network goes in
        // the background either way.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let gateway = self.gateway.clone();
            let key = self.key.clone();
            handle.spawn(async move {
                let _ = gateway.tell(json!({"op": "drop", "key": key})).await;
            });
        }
        self.engine.remove_network_in_background(
            self.network.clone(),
            Some(self.gateway.container_id().to_string()),
        );
    }
}

/// A network taken for a lease not yet made: removed if it never is.
struct Pending {
    engine: Engine,
    network: Option<String>,
    gateway: String,
}

impl Pending {
    fn keep(mut self) {
        self.network = None;
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if let Some(network) = self.network.take() {
            self.engine
                .remove_network_in_background(network, Some(std::mem::take(&mut self.gateway)));
        }
    }
}

fn secrets_json(
    secrets: &[HostSecret],
    placeholders: &[(String, String)],
) -> Result<serde_json::Value> {
    let mut list = Vec::new();
    for (secret, (_, placeholder)) in secrets.iter().zip(placeholders) {
        let hosts = secret
            .hosts
            .iter()
            .map(|h| Rule::parse(h).map(|r| r.to_json()))
            .collect::<Result<Vec<_>>>()?;
        list.push(json!({"placeholder": placeholder, "value": secret.value, "hosts": hosts}));
    }
    Ok(json!(list))
}
