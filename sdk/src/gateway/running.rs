//! The running gateway: one per client and daemon, started with the first
//! sandbox that has a policy and removed with the last, and the ways out it
//! makes ahead.
//!
//! A sandbox's way out, made ahead of need: its own internal network with
//! the gateway attached, a holder container owning the network namespace
//! the sandbox will join, and the gateway's registration (nothing allowed
//! yet). That costs a few hundred milliseconds of Docker's time; a few wait
//! ready so that a sandbox takes one at once, and they are made again in the
//! background.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use serde_json::json;
use tokio::sync::Mutex;

use super::control::Control;
use super::program::{container_spec, holder_spec, RECIPES};
use crate::engine::{ContainerGuard, Engine};
use crate::error::{Error, Result};
use crate::progress::Reporter;
use crate::util::lock;

/// The network the gateway reaches the outside through, when the client
/// does not say (`bridge` when neither does).
pub const NETWORK_ENV: &str = "DOCKHAND_EGRESS_NETWORK";

/// Where a client's gateway reaches the outside, and what it trusts there.
#[derive(Debug, Clone, Default)]
pub(crate) struct GatewaySettings {
    /// The Docker network it reaches hosts through (`bridge` unless told).
    pub outside: Option<String>,
    /// Certificates (PEM) it trusts besides the host's bundle.
    pub trust: Vec<String>,
}

/// Certificate files (`:`-separated) the gateway trusts and builds do not:
/// a private CA of hosts the sandboxes may reach.
pub const TRUST_ENV: &str = "DOCKHAND_EGRESS_CA";

/// What builds trust (the host's CA bundle and the files `DOCKHAND_CA_CERTS`
/// names) and the files `DOCKHAND_EGRESS_CA` names, read now.
async fn host_certificates() -> Result<Vec<String>> {
    let builds = std::env::var(crate::image::CA_CERTS_ENV).unwrap_or_default();
    let gateway = std::env::var(TRUST_ENV).unwrap_or_default();
    crate::util::blocking("reading the host's CA certificates", move || {
        let listed = [builds, gateway];
        crate::image::host_ca_bundle()
            .into_iter()
            .chain(
                listed
                    .iter()
                    .flat_map(std::env::split_paths)
                    .filter(|p| !p.as_os_str().is_empty()),
            )
            .map(|path| {
                std::fs::read_to_string(&path).map_err(|e| {
                    Error::io(
                        format!("reading CA certificates from {}", path.display()),
                        e,
                    )
                })
            })
            .collect()
    })
    .await
}

/// How long the gateway may take to give its figures.
const STATS_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A client's gateway, started on first need.
pub(crate) struct Gateways {
    settings: GatewaySettings,
    current: Mutex<Weak<Gateway>>,
}

impl Gateways {
    pub fn new(settings: GatewaySettings) -> Self {
        Gateways {
            settings,
            current: Mutex::new(Weak::new()),
        }
    }

    /// The running gateway's figures; `None` if none runs (or one is
    /// starting), or it did not answer within 5 s.
    pub async fn stats(&self) -> Result<Option<crate::egress::EgressStats>> {
        let Ok(current) = self.current.try_lock() else {
            return Ok(None);
        };
        let Some(gateway) = current.upgrade().filter(|g| !g.is_dead()) else {
            return Ok(None);
        };
        drop(current);
        let asked = gateway.control.request(json!({"op": "stats"}));
        let Ok(answer) = tokio::time::timeout(STATS_LIMIT, asked).await else {
            return Ok(None);
        };
        Ok(Some(crate::egress::EgressStats::from_answer(&answer?)))
    }

    /// The running gateway, or a new one.
    pub async fn get(&self, engine: &Engine, reporter: &Reporter) -> Result<Arc<Gateway>> {
        let mut current = self.current.lock().await;
        if let Some(gateway) = current.upgrade().filter(|g| !g.is_dead()) {
            return Ok(gateway);
        }
        let gateway = Arc::new(Gateway::start(engine, reporter, &self.settings).await?);
        *current = Arc::downgrade(&gateway);
        Ok(gateway)
    }
}

/// One running gateway.
pub(crate) struct Gateway {
    engine: Engine,
    /// The gateway's image: holders run it too.
    image: String,
    container: ContainerGuard,
    control: Control,
    spares: Spares,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.spares.remove_all(&self.engine, self.container.id());
    }
}

impl Gateway {
    async fn start(
        engine: &Engine,
        reporter: &Reporter,
        settings: &GatewaySettings,
    ) -> Result<Gateway> {
        let image = RECIPES
            .for_engine(engine)
            .await?
            .ensure(engine, reporter)
            .await?;
        let mut trust = settings.trust.clone();
        trust.extend(host_certificates().await?);
        let from_env = std::env::var(NETWORK_ENV).ok().filter(|n| !n.is_empty());
        let outside = settings.outside.clone().or(from_env);
        let outside = outside.as_deref().unwrap_or("bridge");
        let container = engine
            .create_container(&container_spec(&image, outside))
            .await?;
        let attached = engine.attach(container.id()).await?;
        engine.start_container(container.id()).await?;
        let control = Control::start(attached).await?;
        control
            .request(json!({"op": "config", "trust": trust}))
            .await?;
        Ok(Gateway {
            engine: engine.clone(),
            image: image.clone(),
            spares: Default::default(),
            container,
            control,
        })
    }

    pub fn container_id(&self) -> &str {
        self.container.id()
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn image(&self) -> &str {
        &self.image
    }

    pub fn spares(&self) -> &Spares {
        &self.spares
    }

    fn is_dead(&self) -> bool {
        self.control.is_dead()
    }

    /// The channel to it.
    pub fn control(&self) -> &Control {
        &self.control
    }
}

/// How many networks wait ready.
const READY: usize = 2;

/// A way out made ahead, not yet any sandbox's.
pub(crate) struct Spare {
    pub network: String,
    /// The gateway's address on it.
    pub address: IpAddr,
    /// The container holding the network namespace the sandbox joins.
    pub holder: crate::engine::ContainerGuard,
    /// The gateway's name for it, registered with nothing allowed.
    pub key: String,
    /// What a sandbox behind it trusts (PEM): the gateway's roots and the
    /// certificate authority the gateway made for it.
    pub bundle: String,
}

/// The gateway's ready networks.
#[derive(Default)]
pub(crate) struct Spares {
    ready: std::sync::Mutex<Vec<Spare>>,
    refilling: AtomicBool,
}

/// Removes a network whose making did not finish (a dropped call, a failed
/// connect), in the background.
struct NetworkGuard {
    engine: Engine,
    network: String,
    gateway: String,
    armed: bool,
}

impl Drop for NetworkGuard {
    fn drop(&mut self) {
        if self.armed {
            self.engine.remove_network_in_background(
                std::mem::take(&mut self.network),
                Some(std::mem::take(&mut self.gateway)),
            );
        }
    }
}

/// Makes a network, attaches `gateway` to it, starts a holder on it and
/// registers it with nothing allowed.
pub(crate) async fn make(gateway: &Gateway) -> Result<Spare> {
    let engine = gateway.engine();
    let key = uuid::Uuid::new_v4().simple().to_string();
    let network = format!("dockhand-egress-{key}");
    // Armed before the create is sent: a dropped call still removes it (the
    // holder's guard, dropped first, removes the holder).
    let mut guard = NetworkGuard {
        engine: engine.clone(),
        network: network.clone(),
        gateway: gateway.container_id().to_string(),
        armed: true,
    };
    engine.create_internal_network(&network).await?;
    let address = engine
        .connect_network(&network, gateway.container_id())
        .await?;
    let holder = engine
        .create_container(&holder_spec(gateway.image(), &network, address))
        .await?;
    engine.start_container(holder.id()).await?;
    let answer = gateway
        .control()
        .request(serde_json::json!({
            "op": "set",
            "key": key,
            "address": address.to_string(),
            "policy": {"allow": [], "deny": []},
            "secrets": [],
        }))
        .await?;
    let bundle = answer["bundle"].as_str().unwrap_or_default().to_string();
    guard.armed = false;
    Ok(Spare {
        network,
        address,
        holder,
        key,
        bundle,
    })
}

impl Spares {
    /// A ready network, or one made now; either way more are made behind.
    pub async fn take(&self, gateway: &std::sync::Arc<Gateway>) -> Result<Spare> {
        let ready = lock(&self.ready).pop();
        let spare = match ready {
            Some(spare) => spare,
            None => make(gateway).await?,
        };
        self.refill(std::sync::Arc::downgrade(gateway));
        Ok(spare)
    }

    fn refill(&self, gateway: Weak<Gateway>) {
        if self.refilling.swap(true, Ordering::AcqRel) {
            return;
        }
        tokio::spawn(async move {
            loop {
                // Held only while one network is made: the gateway still goes
                // with its last sandbox.
                let Some(strong) = gateway.upgrade() else {
                    return;
                };
                let spares = strong.spares();
                if lock(&spares.ready).len() >= READY {
                    spares.refilling.store(false, Ordering::Release);
                    return;
                }
                match make(&strong).await {
                    Ok(spare) => lock(&spares.ready).push(spare),
                    Err(e) => {
                        tracing::warn!(error = %e, "could not make an egress network ahead");
                        spares.refilling.store(false, Ordering::Release);
                        return;
                    }
                }
            }
        });
    }

    /// Removes the ready ones (the gateway is going): holders, then networks.
    pub fn remove_all(&self, engine: &Engine, container: &str) {
        for spare in lock(&self.ready).drain(..) {
            drop(spare.holder);
            engine.remove_network_in_background(spare.network, Some(container.to_string()));
        }
    }
}
