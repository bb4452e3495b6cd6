//! A session as a pod on a Kubernetes cluster: the static agent copied in
//! by an init container from the agent's image, the session's helpers from
//! a ConfigMap, its secrets in a Secret; spoken to over the agent
//! container's attach stream as on Docker (the backend starts it: see
//! `backend::cluster_program`).

use super::spec::refuse_on;
use super::start::SessionStart;
use super::*;
use crate::cluster::Cluster;
use crate::manifests::{KubeOptions, Manifests, SessionShape};

/// The pod of a session with `c`, as the manifests renderer takes it.
fn shape<'a>(c: &'a SessionConfig, opts: &KubeOptions) -> Result<SessionShape<'a>> {
    Ok(SessionShape {
        name: c.name.as_deref().unwrap_or("session"),
        spec: super::spec::container_spec(c, opts.image())?,
        agent_path: super::agent::pod_agent_path(),
        agent_dir: super::agent::POD_AGENT_DIR,
        install_args: super::agent::install_args(&super::agent::pod_agent_path()),
        workspace: c.workspace_dir(),
        secrets: &c.secrets,
        helpers: &c.helpers,
        egress: c.network != Network::None,
    })
}

/// A session as a Pod, plus its NetworkPolicy and its helpers' ConfigMap
/// (see [`crate::k8s`]): dockhand's static session agent, which an init
/// container copies from the agent's image into a volume of the pod, run in
/// the workspace and spoken to over its attach stream as on Docker.
pub fn session_manifests(config: &SessionConfig, opts: &KubeOptions) -> Result<Manifests> {
    crate::manifests::session_pod(shape(config, opts)?, opts)
}

/// A pool of sessions with `c` on agent-sandbox (see `cluster::AgentPool`):
/// the pod a session would make, as a template, with the agent's ConfigMap
/// shared by its pods. Sessions with secrets or an allow-list keep pods of
/// their own (their objects are each pod's).
async fn agent_pool(
    cluster: &Cluster,
    c: &SessionConfig,
    size: usize,
) -> Result<Option<crate::cluster::AgentPool>> {
    refuse_on(crate::backend::Offers::CLUSTER, c)?;
    crate::cluster::refuse_network(&c.network, &c.secrets)?;
    if !c.secrets.is_empty() || matches!(c.network, Network::Egress(_)) {
        return Ok(None);
    }
    let image = cluster.resolve_image(&c.image).await?;
    let agent = cluster.agent_image().await?;
    let plan = cluster.plan_pod(
        &format!("dockhand-session-{}", c.name.as_deref().unwrap_or("s")),
        &image.reference,
        &[],
        c.network == Network::None,
        |opts| session_manifests(c, &opts.clone().agent_image(agent)),
    )?;
    let egress = c.network != Network::None;
    crate::cluster::AgentPool::open(cluster, plan.pod, plan.companions, (egress, "agent"), size)
        .await
        .map(Some)
}

impl crate::backend::PodRecipe for SessionStart<'_> {
    fn pod(&self) -> Result<crate::backend::InPod<'_>> {
        let inner = &self.session.inner;
        let c = &inner.config;
        Ok(crate::backend::InPod {
            prefix: format!("dockhand-session-{}", c.name.as_deref().unwrap_or("s")),
            image: self.image.clone(),
            values: self.resolved.clone(),
            network: c.network.clone(),
            render: Box::new(move |opts| session_manifests(c, opts)),
            agent_image: true,
            container: "agent",
            ended_early: Box::new(|code, reason| {
                Error::SessionUnavailable {
                reason: format!(
                    "the session agent ended before it was ready ({reason}, exit {code}); is python3 in the image?"
                ),
            }
            }),
            // Half the start's time at most, so one made here still fits.
            claims: inner
                .claims
                .as_deref()
                .map(|claims| (claims, crate::warm::WAIT_LIMIT.min(c.start_timeout / 2))),
        })
    }
}

impl crate::backend::PoolTemplate for SessionConfig {
    async fn agent_pool(
        &self,
        cluster: &Cluster,
        size: usize,
    ) -> Result<Option<crate::backend::AgentPool>> {
        agent_pool(cluster, self, size).await
    }
}
