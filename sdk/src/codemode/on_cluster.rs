//! A code host as a pod on a Kubernetes cluster: the compiled bridge in a
//! code host image the nodes pull, spoken to over the `bridge` container's
//! attach stream (there is no socket of this machine's to offer a pod).
//! The backend starts it (see `backend::cluster_program`); the bridge
//! starts before anyone can attach, so `launch` greets it with `hello`.

use super::bridge::Launch;
use super::launch::HostStart;
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

/// A pool of code hosts launched as `how` says on agent-sandbox (see
/// `cluster::AgentPool`): the pod a code host would make, as a template.
async fn agent_pool(
    cluster: &Cluster,
    how: Launch<'_>,
    size: usize,
) -> Result<crate::cluster::AgentPool> {
    refuse_mounts(&how)?;
    let reference = cluster.code_host_image(how.image).await?.reference;
    let plan = plan(cluster, &how, &reference)?;
    crate::cluster::AgentPool::open(cluster, plan.pod, plan.companions, (false, "bridge"), size)
        .await
}

/// A node has no path of this machine's to mount.
fn refuse_mounts(how: &Launch<'_>) -> Result<()> {
    if how.mounts.is_empty() {
        return Ok(());
    }
    Err(crate::cluster::unsupported(
        "mounted directories on a code host",
        "give the data as inputs or read it through a tool",
    ))
}

/// The code host's pod from `reference`, planned: always offline.
fn plan(cluster: &Cluster, how: &Launch<'_>, reference: &str) -> Result<crate::cluster::PodPlan> {
    cluster.plan_pod("dockhand-code-host", reference, &[], true, |opts| {
        crate::manifests::code_host_pod(super::bridge::host_spec(how, opts.image())?, opts)
    })
}

impl crate::backend::PodRecipe for HostStart<'_> {
    /// Always offline (the code is a model's).
    fn pod(&self) -> Result<crate::backend::InPod<'_>> {
        let how = &self.how;
        let reference = self.image.clone();
        Ok(crate::backend::InPod {
            prefix: "dockhand-code-host".into(),
            image: self.image.clone(),
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
        })
    }
}

impl crate::backend::PoolTemplate for super::CodeHostConfig {
    async fn agent_pool(
        &self,
        cluster: &Cluster,
        size: usize,
    ) -> Result<Option<crate::backend::AgentPool>> {
        agent_pool(cluster, self.launch()?, size).await.map(Some)
    }
}
