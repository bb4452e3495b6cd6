//! A sandbox's way out, made ahead of need: its own internal network with
//! the gateway attached, a holder container owning the network namespace
//! the sandbox will join, and the gateway's registration (nothing allowed
//! yet). That costs a few hundred milliseconds of Docker's time; a few wait
//! ready so that a sandbox takes one at once, and they are made again in the
//! background.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Weak;

use super::gateway::Gateway;
use crate::engine::Engine;
use crate::error::Result;
use crate::util::lock;

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
        .create_container(&super::gateway::holder_spec(
            gateway.image(),
            &network,
            address,
        ))
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
