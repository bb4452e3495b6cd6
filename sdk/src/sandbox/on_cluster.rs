//! A one-shot run as a Kubernetes Job, for users who apply manifests
//! themselves (see [`crate::k8s`]); a client on a cluster launches its
//! attempts through the backend (`backend::cluster_one_shot`).

use super::spec::Sandbox;
use super::value::Value;
use crate::error::Result;
use crate::manifests::{KubeOptions, Manifests};
use crate::settings::Network;

/// A one-shot run of `sandbox` with `inputs` as a Job, plus its
/// NetworkPolicy (see [`crate::k8s`]).
///
/// The pod has three containers: `inputs` (an init container that extracts
/// the inputs archive the backend streams to its stdin into `/var/inputs`),
/// `program` (the sandbox's own command, `/var/inputs` read-only), and
/// `outputs` (which, once the backend has seen `program` end, streams
/// `/var/outputs` as a tar on its stdout). How `program` ended is read from
/// the pod's status, which the kubelet writes, not the code.
pub fn one_shot_manifests<I, K, V>(
    sandbox: &Sandbox,
    inputs: I,
    opts: &KubeOptions,
) -> Result<Manifests>
where
    I: IntoIterator<Item = (K, V)>,
    K: Into<String>,
    V: Into<Value>,
{
    let given = super::inputs::named(inputs);
    let bound = super::inputs::validate(sandbox, given)?;
    let command = super::inputs::command_line(sandbox, &bound);
    let shape = super::launch::shape(sandbox, opts.image(), Vec::new());
    crate::manifests::one_shot_job(crate::backend::render_shape(&shape, opts, command), opts)
}

/// A pool's pods of a sandbox from an image reference.
impl crate::backend::PoolTemplate for (&Sandbox, &str) {
    async fn agent_pool(
        &self,
        cluster: &crate::backend::Cluster,
        size: usize,
    ) -> Result<Option<crate::backend::AgentPool>> {
        // An allow-list is a policy of each pod's own: such a pool keeps
        // pods of its own.
        if matches!(self.0.runtime.network, Network::Egress(_)) {
            return Ok(None);
        }
        let shape = super::launch::shape(self.0, self.1, Vec::new());
        let pool = crate::backend::one_shot_agent_pool(cluster, &shape, size).await?;
        Ok(Some(pool))
    }
}
