//! What a long-lived object (a session, a code host) runs in: a container
//! on Docker, a pod on a Kubernetes cluster. Each is owned by a guard from
//! before its create request; removing it (or dropping it) ends the object.

use crate::engine::ContainerGuard;
use crate::error::Result;

pub(crate) enum Held {
    Container(ContainerGuard),
    #[cfg(feature = "kubernetes")]
    Pod(crate::cluster::PodGuard),
}

impl Held {
    /// The container's id, or the pod's name.
    pub(crate) fn id(&self) -> &str {
        match self {
            Held::Container(guard) => guard.id(),
            #[cfg(feature = "kubernetes")]
            Held::Pod(guard) => guard.name(),
        }
    }

    /// Removes it now; one already gone is fine.
    pub(crate) async fn remove(self) -> Result<()> {
        match self {
            Held::Container(guard) => guard.remove().await,
            #[cfg(feature = "kubernetes")]
            Held::Pod(guard) => guard.remove().await,
        }
    }
}
