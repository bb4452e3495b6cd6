//! A code host as a pod on a Kubernetes cluster: the compiled bridge in a
//! code host image the nodes pull, spoken to over the `bridge` container's
//! attach stream (there is no socket of this machine's to offer a pod).
//! The backend starts it (see `backend::cluster_program`); the bridge
//! starts before anyone can attach, so `launch` greets it with `hello`.

use super::bridge::Launch;
use super::launch::{refuse_mounts, HostStart};
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::manifests::{KubeOptions, Manifests};

/// A code host as a Pod, plus its NetworkPolicy (see [`crate::k8s`]): the
/// bridge under Monty, spoken to over its attach stream as on Docker; always
/// offline. Mounted directories are refused (a node has no path of this
/// machine's): give the data as inputs or through a tool.
pub fn code_host_manifests(
    config: &super::CodeHostConfig,
    opts: &KubeOptions,
) -> Result<Manifests> {
    if !config.mounts.is_empty() {
        return Err(Error::spec(
            "code host",
            "mounted directories are copied in by the Docker backend only; on Kubernetes, give the data as inputs or through a tool",
        ));
    }
    let launch = config.launch()?;
    crate::manifests::code_host_pod(super::bridge::host_spec(&launch, opts.image())?, opts)
}

/// The pod of a code host launched as `how` says, from the code host image
/// `image`: always offline (the code is a model's).
fn host_pod<'a>(how: &'a Launch<'_>, image: String) -> crate::backend::InPod<'a> {
    let reference = image.clone();
    crate::backend::InPod {
        prefix: "dockhand-code-host".into(),
        image,
        values: Vec::new(),
        network: crate::settings::Network::None,
        render: Box::new(move |opts| {
            crate::manifests::code_host_pod(super::bridge::host_spec(how, opts.image())?, opts)
        }),
        agent_image: false,
        container: "bridge",
        ended_early: Box::new(move |code, reason| {
            Error::CodeHostUnavailable {
            reason: format!(
                "the bridge ended before it was ready ({reason}, exit {code}); is {reference} a code host image dockhand made?"
            ),
        }
        }),
        // Half the start's time at most, so one made here still fits.
        claims: how
            .claims
            .map(|claims| (claims, crate::warm::WAIT_LIMIT.min(how.start_timeout / 2))),
    }
}

impl crate::backend::PodRecipe for HostStart<'_> {
    fn pod(&self) -> Result<crate::backend::InPod<'_>> {
        Ok(host_pod(&self.how, self.image.clone()))
    }
}

/// A pool of code hosts with a config on agent-sandbox: the pod a code
/// host would make, as a template.
impl crate::backend::PoolTemplate for super::CodeHostConfig {
    async fn agent_pool(
        &self,
        cluster: &Cluster,
        size: usize,
    ) -> Result<Option<crate::backend::AgentPool>> {
        let how = self.launch()?;
        refuse_mounts(crate::backend::Offers::CLUSTER, &how)?;
        let image = cluster.code_host_image(how.image).await?.reference;
        let pod = host_pod(&how, image);
        let pool = crate::backend::agent_pool_of(cluster, &pod, size).await?;
        Ok(Some(pool))
    }
}
