//! Networks made ahead of need: a sandbox's own internal network, with the
//! gateway already attached, costs a create and a connect (tens of
//! milliseconds each); a few wait ready so that a sandbox takes one at once,
//! and they are made again in the background.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Weak;

use super::gateway::Gateway;
use crate::engine::Engine;
use crate::error::Result;
use crate::util::lock;

/// How many networks wait ready.
const READY: usize = 2;

/// A network with the gateway attached, not yet any sandbox's.
pub(crate) struct Spare {
    pub network: String,
    /// The gateway's address on it.
    pub address: IpAddr,
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

/// Makes a network and attaches the gateway `container` to it.
pub(crate) async fn make(engine: &Engine, container: &str) -> Result<Spare> {
    let network = format!("dockhand-egress-{}", uuid::Uuid::new_v4().simple());
    // Armed before the create is sent: a dropped call still removes it.
    let mut guard = NetworkGuard {
        engine: engine.clone(),
        network: network.clone(),
        gateway: container.to_string(),
        armed: true,
    };
    engine.create_internal_network(&network).await?;
    let address = engine.connect_network(&network, container).await?;
    guard.armed = false;
    Ok(Spare { network, address })
}

impl Spares {
    /// A ready network, or one made now; either way more are made behind.
    pub async fn take(&self, gateway: &std::sync::Arc<Gateway>) -> Result<Spare> {
        let ready = lock(&self.ready).pop();
        let spare = match ready {
            Some(spare) => spare,
            None => make(gateway.engine(), gateway.container_id()).await?,
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
                match make(strong.engine(), strong.container_id()).await {
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

    /// Removes the ready networks (the gateway is going).
    pub fn remove_all(&self, engine: &Engine, container: &str) {
        for spare in lock(&self.ready).drain(..) {
            engine.remove_network_in_background(spare.network, Some(container.to_string()));
        }
    }
}
