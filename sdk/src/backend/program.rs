//! A long-lived program (a session's agent, a code host's bridge) started
//! and attached on whichever backend the client has. The capability gives
//! a [`Recipe`]: what its container is on Docker, what its pod is on a
//! cluster, each asked for only by that backend. The backend makes it,
//! owns it from before the create request, attaches to it, and hands it to
//! the capability's handshake, all within the capability's start limit.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;

use super::Held;
use crate::engine::{Attached, ContainerSpec, Engine};
use crate::error::{Error, Result};

/// How a long-lived program is made on each backend: its container here,
/// its pod in the capability's cluster module ([`PodRecipe`](super::PodRecipe),
/// which asks nothing of a build without the `kubernetes` feature).
pub(crate) trait Recipe: Sync + super::PodRecipe {
    /// Its container on Docker: what it is made with, what goes in before
    /// its start, its way out. Asked before the start's limit runs: it
    /// may build an image or open a gateway.
    fn container<'a>(
        &'a self,
        engine: &'a Engine,
    ) -> impl Future<Output = Result<InContainer>> + Send + 'a;
}

/// A long-lived program's container.
pub(crate) struct InContainer {
    pub(crate) spec: ContainerSpec,
    /// Archives extracted before the start: (directory, tar).
    pub(crate) uploads: Vec<(String, Bytes)>,
    /// Its network and registration with the egress gateway, under a policy.
    pub(crate) egress: Option<crate::gateway::Lease>,
    /// What a start that takes too long may be waiting for, before the
    /// backend's own guess.
    pub(crate) slow_hint: String,
}

/// A program started and attached, handed to the capability's handshake.
pub(crate) struct Started {
    /// Owns the container or pod: dropping it removes it.
    pub(crate) held: Held,
    /// Its stdin, and its stdout and stderr. The attach stream may outlive
    /// the program (its container removed from outside, its node lost):
    /// [`Backend::wait_ended`](super::Backend::wait_ended) sees its end.
    pub(crate) attached: Attached,
    /// How often to greet the program again until it answers: a pod is
    /// attached after its start, and the attach wires stdout after stdin
    /// (containerd), so the first answers can miss the stream.
    pub(crate) regreet: Option<Duration>,
    /// The way out it was made with (Docker).
    pub(crate) egress: Option<crate::gateway::Lease>,
}

/// Starts `recipe`'s program on Docker and runs `handshake` with it. What
/// the recipe prepares (an image build, a gateway) is outside `limit`; the
/// container's making, start and the handshake are within it, and past it
/// is `too_slow` with what the start may wait for.
pub(super) async fn on_docker<R, T, Fut>(
    engine: &Engine,
    recipe: &R,
    limit: Duration,
    handshake: impl FnOnce(Started) -> Fut + Send,
    too_slow: impl FnOnce(&str) -> Error,
) -> Result<T>
where
    R: Recipe,
    Fut: Future<Output = Result<T>> + Send,
{
    let made = recipe.container(engine).await?;
    let InContainer {
        spec,
        uploads,
        egress,
        slow_hint,
    } = made;
    // Dropping the block drops the container's guard, which removes it.
    let started = async {
        let container = engine.create_container(&spec).await?;
        let id = container.id().to_string();
        for (dir, tar) in uploads {
            engine.upload_archive(&id, &dir, tar).await?;
        }
        if let Some(lease) = &egress {
            lease.install(engine, &id).await?;
        }
        // Attached before the start: nothing the program says is missed.
        let attached = engine.attach(&id).await?;
        engine.start_container(&id).await?;
        handshake(Started {
            held: Held::Container(container),
            attached,
            regreet: None,
            egress,
        })
        .await
    };
    match tokio::time::timeout(limit, started).await {
        Ok(result) => result,
        Err(_) => Err(too_slow(&format!(
            "{slow_hint}is the daemon or its runtime wedged?"
        ))),
    }
}
