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

/// The pod of a session with `c` (its workspace on the claim `files`, if
/// given), as the manifests renderer takes it.
fn shape<'a>(
    c: &'a SessionConfig,
    opts: &KubeOptions,
    files: Option<&'a str>,
) -> Result<SessionShape<'a>> {
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
        files_claim: files,
    })
}

/// A session as a Pod, plus its NetworkPolicy and its helpers' ConfigMap
/// (see [`crate::k8s`]): dockhand's static session agent, which an init
/// container copies from the agent's image into a volume of the pod, run in
/// the workspace and spoken to over its attach stream as on Docker.
pub fn session_manifests(config: &SessionConfig, opts: &KubeOptions) -> Result<Manifests> {
    crate::manifests::session_pod(shape(config, opts, None)?, opts)
}

/// The pod of a session with `c` from `image`, with the secrets' `values`,
/// claimed from `claims` if given (and bound within half the start's time,
/// so one made after still fits); a session whose files are on a claim
/// (`files`) has a pod of its own that mounts it.
fn session_pod<'a>(
    c: &'a SessionConfig,
    image: String,
    values: Vec<(String, String)>,
    claims: Option<&'a crate::backend::AgentPool>,
    files: Option<String>,
) -> crate::backend::InPod<'a> {
    let claims = claims.filter(|_| files.is_none());
    crate::backend::InPod {
        prefix: format!("dockhand-session-{}", c.name.as_deref().unwrap_or("s")),
        image,
        values,
        network: c.network.clone(),
        render: Box::new(move |opts| {
            crate::manifests::session_pod(shape(c, opts, files.as_deref())?, opts)
        }),
        agent_image: true,
        container: "agent",
        ended_early: Box::new(|code, reason| {
            Error::SessionUnavailable {
            reason: format!(
                "the session agent ended before it was ready ({reason}, exit {code}); can the image's user run programs from the agent's volume?"
            ),
        }
        }),
        claims: claims.map(|claims| (claims, crate::warm::WAIT_LIMIT.min(c.start_timeout / 2))),
    }
}

impl crate::backend::PodRecipe for SessionStart<'_> {
    fn pod(&self) -> Result<crate::backend::InPod<'_>> {
        let inner = &self.session.inner;
        let (image, values) = (self.image.clone(), self.resolved.clone());
        Ok(session_pod(
            &inner.config,
            image,
            values,
            inner.claims.as_deref(),
            self.session.files_claim(),
        ))
    }
}

/// A pool of sessions with a config on agent-sandbox: the pod a session
/// would make, as a template, with the agent's ConfigMap shared by its
/// pods. Sessions with secrets or an allow-list keep pods of their own
/// (their objects are each pod's).
impl crate::backend::PoolTemplate for SessionConfig {
    async fn agent_pool(
        &self,
        cluster: &Cluster,
        size: usize,
    ) -> Result<Option<crate::backend::AgentPool>> {
        refuse_on(crate::backend::Offers::CLUSTER, self)?;
        crate::cluster::refuse_network(&self.network, &self.secrets)?;
        // Secrets, an allow-list, volumes or a claim of its own are each
        // pod's: such sessions keep pods of their own.
        let own = !self.secrets.is_empty()
            || matches!(self.network, Network::Egress(_))
            || !self.volumes.is_empty()
            || self.pausable;
        if own {
            return Ok(None);
        }
        let image = cluster.resolve_image(&self.image).await?.reference;
        let pod = session_pod(self, image, Vec::new(), None, None);
        crate::backend::agent_pool_of(cluster, &pod, size)
            .await
            .map(Some)
    }
}
