//! One sandbox's way out: its own internal network, the gateway attached
//! to it, its policy and secrets registered with the gateway, and what its
//! container is given (network, DNS, proxy variables, trust store,
//! placeholders). Dropping the lease removes the network, whatever happened.

use std::net::IpAddr;
use std::sync::Arc;

use serde_json::json;

use super::running::Gateway;
use crate::archive::{build_tar, TarFile};
use crate::egress::rules::Rule;
use crate::egress::{Egress, PROXY_PORT};
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
    /// The container holding the sandbox's network namespace; removed
    /// before the network.
    holder: Option<crate::engine::ContainerGuard>,
    /// The trust store, on this machine, when the daemon shares its files.
    trust_file: Option<tempfile::NamedTempFile>,
    /// The gateway's answer to the registration, until it is read.
    registered: tokio::sync::Mutex<Option<super::control::Answer>>,
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
    /// Takes a way out made ahead (or makes one) and registers the policy
    /// and secrets with the gateway.
    pub async fn open(
        access: super::Access<'_>,
        policy: &Egress,
        secrets: Vec<HostSecret>,
    ) -> Result<Lease> {
        let body = policy.to_json()?;
        let engine = access.engine;
        let gateway = access.gateways.get(engine, access.reporter).await?;
        let spare = gateway.spares().take(&gateway).await?;
        // Until the lease exists, a failure (or a dropped call) removes it.
        let mut pending = Pending {
            engine: engine.clone(),
            network: Some(spare.network.clone()),
            gateway: gateway.container_id().to_string(),
            holder: Some(spare.holder),
        };
        let placeholders: Vec<(String, String)> = secrets
            .iter()
            .map(|s| {
                let random = uuid::Uuid::new_v4().simple().to_string();
                (s.name.clone(), format!("dockhand-placeholder-{random}"))
            })
            .collect();
        // The answer is awaited before the container starts (`install`),
        // while its create goes on.
        let registered = gateway
            .control()
            .send(json!({
                "op": "set",
                "key": spare.key,
                "address": spare.address.to_string(),
                "policy": body,
                "secrets": secrets_json(&secrets, &placeholders)?,
            }))
            .await?;
        // A daemon on this machine reads the trust store from a file here
        // (a bind mount costs nothing at start); another gets it uploaded.
        let trust_file = if engine.shares_filesystem() {
            let bundle = spare.bundle.clone();
            Some(
                crate::util::blocking("writing the sandbox's trust store", move || {
                    write_trust(&bundle)
                })
                .await?,
            )
        } else {
            None
        };
        let holder = pending.keep();
        Ok(Lease {
            gateway,
            engine: engine.clone(),
            network: spare.network,
            holder,
            address: spare.address,
            key: spare.key,
            bundle: spare.bundle,
            trust_file,
            registered: tokio::sync::Mutex::new(Some(registered)),
            placeholders,
            closed: false,
        })
    }

    /// Gives the container its network (the holder's namespace), proxy,
    /// trust store and placeholders (the real values stay with the gateway).
    pub fn apply(&self, spec: &mut ContainerSpec) {
        let holder = self
            .holder
            .as_ref()
            .map(|h| h.id().to_string())
            .unwrap_or_default();
        spec.network = Some(format!("container:{holder}"));
        // The holder's DNS (the gateway) comes with its namespace.
        spec.dns.clear();
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
        match &self.trust_file {
            Some(file) => spec.mounts.push(crate::engine::Mount {
                host_path: file.path().display().to_string(),
                container_path: ca,
                read_only: true,
            }),
            None => spec.scratch_volumes.push(CA_DIR.to_string()),
        }
        for (name, placeholder) in &self.placeholders {
            spec.env.retain(|e| !e.starts_with(&format!("{name}=")));
            spec.env.push(format!("{name}={placeholder}"));
        }
    }

    /// The error for a run whose gateway died while it ran: whatever the
    /// program sent out from then on reached nothing, so its result cannot
    /// be taken as the run's.
    pub fn lost(&self) -> Option<Error> {
        self.gateway.control().is_dead().then(|| Error::EgressGateway {
            reason: "it died while the sandbox ran: the program's connections out failed from then on \
                     (nothing reached a host the policy does not allow); the next run gets a new gateway"
                .into(),
        })
    }

    /// The placeholder the sandbox holds for secret `name`.
    pub fn placeholder(&self, name: &str) -> Option<&str> {
        self.placeholders
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p.as_str())
    }

    /// Makes a created container ready to start: the gateway has taken the
    /// policy, and the trust store is in (unless it is bind-mounted).
    pub async fn install(&self, engine: &Engine, container: &str) -> Result<()> {
        let registered = self.registered.lock().await.take();
        if let Some(answer) = registered {
            answer.wait().await?;
        }
        if self.trust_file.is_some() {
            return Ok(());
        }
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
            .control()
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

    /// Unregisters the sandbox (its container must be gone, or going) and
    /// removes its holder and network in the background: nobody waits for
    /// that.
    pub async fn close(mut self) {
        self.closed = true;
        let _ = self
            .gateway
            .control()
            .tell(json!({"op": "drop", "key": self.key}))
            .await;
        if let Some(holder) = self.holder.take() {
            holder.remove_in_background();
        }
        self.engine.remove_network_in_background(
            self.network.clone(),
            Some(self.gateway.container_id().to_string()),
        );
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
                let _ = gateway
                    .control()
                    .tell(json!({"op": "drop", "key": key}))
                    .await;
            });
        }
        // The holder goes first (its guard's drop), the network after it.
        drop(self.holder.take());
        self.engine.remove_network_in_background(
            self.network.clone(),
            Some(self.gateway.container_id().to_string()),
        );
    }
}

/// Writes the trust store where a bind mount can take it: readable by the
/// sandbox's user, removed with the lease.
fn write_trust(bundle: &str) -> Result<tempfile::NamedTempFile> {
    use std::io::Write as _;
    use std::os::unix::fs::PermissionsExt as _;
    let wrap = |e| Error::io("writing the sandbox's trust store", e);
    let mut file = tempfile::Builder::new()
        .prefix("dockhand-egress-ca-")
        .suffix(".pem")
        .tempfile()
        .map_err(wrap)?;
    file.write_all(bundle.as_bytes()).map_err(wrap)?;
    file.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o444))
        .map_err(wrap)?;
    Ok(file)
}

/// A way out taken for a lease not yet made: removed if it never is.
struct Pending {
    engine: Engine,
    network: Option<String>,
    gateway: String,
    holder: Option<crate::engine::ContainerGuard>,
}

impl Pending {
    fn keep(&mut self) -> Option<crate::engine::ContainerGuard> {
        self.network = None;
        self.holder.take()
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        drop(self.holder.take());
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
