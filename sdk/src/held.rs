//! What a long-lived object (a session, a code host) runs in: a container
//! on Docker, a pod on a Kubernetes cluster. Each is owned by a guard from
//! before its create request; removing it (or dropping it) ends the object.

use crate::engine::ContainerGuard;
use crate::error::Result;

pub(crate) enum Held {
    Container(ContainerGuard),
    #[cfg(feature = "kubernetes")]
    Pod(crate::cluster::PodGuard),
    /// A pod of agent-sandbox's, owned through the claim that holds it.
    #[cfg(feature = "kubernetes")]
    Claim(Box<crate::cluster::ClaimGuard>),
}

impl Held {
    /// The container's id, or the pod's name.
    pub(crate) fn id(&self) -> &str {
        match self {
            Held::Container(guard) => guard.id(),
            #[cfg(feature = "kubernetes")]
            Held::Pod(guard) => guard.name(),
            #[cfg(feature = "kubernetes")]
            Held::Claim(claim) => claim.pod(),
        }
    }

    /// Removes it on a task of its own, so the caller answers now (each
    /// guard's drop does exactly this).
    #[cfg(feature = "kubernetes")]
    pub(crate) fn remove_in_background(self) {
        drop(self)
    }

    /// Lets it outlive this process (a kept session): nothing is removed.
    pub(crate) fn release(self) {
        match self {
            Held::Container(guard) => guard.release(),
            // Pods are not kept (kept sessions are refused on a cluster).
            #[cfg(feature = "kubernetes")]
            other => drop(other),
        }
    }

    /// Removes it now; one already gone is fine.
    pub(crate) async fn remove(self) -> Result<()> {
        match self {
            Held::Container(guard) => guard.remove().await,
            #[cfg(feature = "kubernetes")]
            Held::Pod(guard) => guard.remove().await,
            #[cfg(feature = "kubernetes")]
            Held::Claim(claim) => claim.remove().await,
        }
    }
}
