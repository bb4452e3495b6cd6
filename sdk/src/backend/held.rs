//! What a long-lived object (a session, a code host) runs in: a container
//! on Docker, a pod on a Kubernetes cluster. Each is owned by a guard from
//! before its create request; removing it (or dropping it) ends the object.

use crate::engine::ContainerGuard;
use crate::error::Result;

// Pods are made on a cluster only (feature `kubernetes`).
#[cfg_attr(not(feature = "kubernetes"), allow(dead_code))]
pub(crate) enum Held {
    Container(ContainerGuard),
    Pod(crate::backend::PodGuard),
    /// A pod of agent-sandbox's, owned through the claim that holds it.
    Claim(Box<crate::backend::ClaimGuard>),
    /// Nothing runs: a paused session's pod was deleted, its files stay on
    /// the claim named here (the session owns the claim).
    Stopped(String),
}

impl Held {
    /// The container's id, or the pod's name.
    pub(crate) fn id(&self) -> &str {
        match self {
            Held::Container(guard) => guard.id(),
            Held::Pod(guard) => guard.name(),
            Held::Claim(claim) => claim.pod(),
            Held::Stopped(files) => files,
        }
    }

    /// Removes it on a task of its own, so the caller answers now (each
    /// guard's drop does exactly this).
    #[cfg_attr(not(feature = "kubernetes"), allow(dead_code))]
    pub(crate) fn remove_in_background(self) {
        drop(self)
    }

    /// Lets it outlive this process (a kept session): nothing is removed.
    pub(crate) fn release(self) {
        match self {
            Held::Container(guard) => guard.release(),
            // A kept session's pod goes with its process: its files stay
            // on its claim, which the session releases.
            other => drop(other),
        }
    }

    /// Removes it now; one already gone is fine.
    pub(crate) async fn remove(self) -> Result<()> {
        match self {
            Held::Container(guard) => guard.remove().await,
            Held::Pod(guard) => guard.remove().await,
            Held::Claim(claim) => claim.remove().await,
            Held::Stopped(_) => Ok(()),
        }
    }
}
