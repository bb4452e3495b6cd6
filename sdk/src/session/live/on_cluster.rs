//! A session as a pod on a Kubernetes cluster: the static agent copied in
//! by an init container from the agent's image, the session's helpers from
//! a ConfigMap, its secrets in a Secret; spoken to over the agent
//! container's attach stream as on Docker.
//!
//! A container on a cluster starts before anyone can attach to it, so the
//! agent's first `ready` line goes to the kubelet's log. The backend asks
//! again with a `hello` once attached; the agent answers it with `ready`.
//! An attach wires stdin before stdout (containerd), so that answer too can
//! miss the stream: the hello is repeated until a `ready` arrives.

use super::launch::connect;

/// How long the backend waits for the agent's `ready` before greeting it again.
const REGREET_EVERY: std::time::Duration = std::time::Duration::from_millis(500);
use super::*;
use crate::cluster::Cluster;
use crate::manifests::{KubeOptions, Manifests, SessionShape};

/// The pod of a session with `c`, as the manifests renderer takes it.
fn shape<'a>(c: &'a SessionConfig, opts: &KubeOptions) -> Result<SessionShape<'a>> {
    Ok(SessionShape {
        name: c.name.as_deref().unwrap_or("session"),
        spec: super::launch::container_spec(c, opts.image())?,
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
pub(crate) async fn agent_pool(
    cluster: &Cluster,
    c: &SessionConfig,
    size: usize,
) -> Result<Option<crate::cluster::AgentPool>> {
    refuse_on_cluster(c)?;
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

impl Session {
    pub(super) async fn launch_on_cluster(&self, cluster: &Cluster) -> Result<Arc<Conn>> {
        let c = &self.inner.config;
        refuse_on_cluster(c)?;
        let image = cluster.resolve_image(&c.image).await?;
        lock(&self.inner.status).life.image = Some(image.reference.clone());
        let resolved = c
            .secrets
            .iter()
            .map(|s| Ok((s.name().to_string(), s.resolve()?)))
            .collect::<Result<Vec<_>>>()?;
        *lock(&self.inner.secrets) = resolved.clone();
        if let Some(claims) = &self.inner.claims {
            // Half the start's time at most, so one made here still fits.
            let wait = crate::warm::WAIT_LIMIT.min(c.start_timeout / 2);
            if let Some(claim) = claims.claim(wait).await? {
                let name = claim.pod().to_string();
                let held = Held::Claim(Box::new(claim));
                return self.attach_agent(cluster, name, async { Ok(held) }).await;
            }
            // None bound in time: a pod of its own.
        }
        let allow = crate::cluster::allow_list(&c.network).await?;
        let agent = cluster.agent_image().await?;
        let mut plan = cluster.plan_pod(
            &format!("dockhand-session-{}", c.name.as_deref().unwrap_or("s")),
            &image.reference,
            &resolved,
            c.network == Network::None,
            |opts| session_manifests(c, &opts.clone().agent_image(agent)),
        )?;
        if let Some(list) = allow {
            list.apply(&mut plan);
        }
        let name = plan.name.clone();
        let launched = async {
            let (guard, _uid) = cluster.launch_pod(&plan.pod, &plan.companions).await?;
            Ok(Held::Pod(guard))
        };
        self.attach_agent(cluster, name, launched).await
    }

    /// Waits for the agent of pod `name` (made by `held`, or already held),
    /// attaches to it and says hello, all within the start timeout.
    async fn attach_agent(
        &self,
        cluster: &Cluster,
        name: String,
        held: impl std::future::Future<Output = Result<Held>>,
    ) -> Result<Arc<Conn>> {
        let c = &self.inner.config;
        let started = async {
            let held = held.await?;
            cluster
                .wait_running(&name, "agent", |code, reason| Error::SessionUnavailable {
                    reason: format!(
                        "the session agent ended before it was ready ({reason}, exit {code}); is python3 in the image?"
                    ),
                })
                .await?;
            let attached = cluster.attach_interactive(&name, "agent").await?;
            let mut input = attached.input;
            let hello = async {
                input.write_all(b"{\"type\":\"hello\"}\n").await?;
                input.flush().await
            };
            hello.await.map_err(|e| Error::SessionUnavailable {
                reason: format!("the session agent's stdin closed: {e}"),
            })?;
            // The attach stream may outlive the pod (deleted from outside,
            // its node lost): the agent's end is watched too.
            let exited = {
                let (client, name) = (self.inner.client.clone(), name.clone());
                async move {
                    if let Some(cluster) = client.cluster() {
                        let _ = cluster
                            .wait_pod(&name, |p| {
                                let view = p;
                                (view.terminated("agent").is_some()
                                    || view.failure("agent").is_some())
                                .then_some(Ok(()))
                            })
                            .await;
                    }
                }
            };
            connect(
                held,
                input,
                attached.output,
                exited,
                None,
                None,
                Some(REGREET_EVERY),
            )
            .await
        };
        // Kept until the scheduler's reason is read: dropping it deletes the pod.
        let mut started = std::pin::pin!(started);
        match tokio::time::timeout(c.start_timeout, &mut started).await {
            Ok(result) => result,
            Err(_) => Err(cluster
                .why_not_started(
                    &name,
                    Error::SessionUnavailable {
                        reason: format!(
                            "the session's pod did not start within {:?} (is the image pullable? are the namespace's quotas full? `SessionConfig::start_timeout` allows more for a first pull)",
                            c.start_timeout
                        ),
                    },
                )
                .await),
        }
    }
}

/// What a session on a cluster cannot have, refused before anything is made.
pub(super) fn refuse_on_cluster(c: &SessionConfig) -> Result<()> {
    if !c.mounts.is_empty() {
        return Err(crate::cluster::unsupported(
            "host directories mounted into a session",
            "a node has no path of this machine's: copy files in with write_file",
        ));
    }
    if c.persist {
        return Err(crate::cluster::unsupported(
            "persisting a session as a snapshot image",
            "a cluster has no image commit: keep what matters by reading it out (read_file) before close",
        ));
    }
    crate::cluster::refuse_network(&c.network, &c.secrets)
}
