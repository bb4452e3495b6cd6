//! A long-lived program as a pod on a Kubernetes cluster: claimed from
//! agent-sandbox's warm pool or made now (with its Secret, ConfigMaps and
//! allow-list), waited for until its container runs, and attached.
//!
//! A container on a cluster starts before anyone can attach to it, so the
//! program's first `ready` goes to the kubelet's log: the capability's
//! handshake greets it again (see [`Started::regreet`]).

use std::future::Future;
use std::time::Duration;

use super::program::{Recipe, Started};
use super::AgentPool;
use super::Held;
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::settings::Network;

/// The error when a program ends before it runs, from its exit code and reason.
pub(crate) type EndedEarly<'a> = Box<dyn Fn(i32, &str) -> Error + Send + Sync + 'a>;

/// How a capability renders its pod, from the options the backend chose.
pub(crate) type Render<'a> = Box<
    dyn Fn(&crate::manifests::KubeOptions) -> Result<crate::manifests::Manifests>
        + Send
        + Sync
        + 'a,
>;

/// A long-lived program's pod.
pub(crate) struct InPod<'a> {
    /// Its pods' names start with this.
    pub(crate) prefix: String,
    /// The image the nodes pull.
    pub(crate) image: String,
    /// Secret names and values, for the pod's Secret object.
    pub(crate) values: Vec<(String, String)>,
    pub(crate) network: Network,
    /// The pod and its companions, rendered with the options the backend
    /// chose (its name, image, namespace, placement, the agent's image).
    pub(crate) render: Render<'a>,
    /// Whether the pod copies dockhand's session agent from the agent's
    /// image (which the backend names in the render options).
    pub(crate) agent_image: bool,
    /// The container the program runs in.
    pub(crate) container: &'static str,
    /// The error when the program ends before it is running.
    pub(crate) ended_early: EndedEarly<'a>,
    /// The agent-sandbox pool to claim the pod from, and how long to wait
    /// for a claim before making a pod of its own.
    pub(crate) claims: Option<(&'a AgentPool, Duration)>,
}

/// How a long-lived program's pod is made (the capability's side of a
/// [`Recipe`] on a cluster).
pub(crate) trait PodRecipe {
    /// Its pod, for the backend to claim or make.
    fn pod(&self) -> Result<InPod<'_>>;
}

/// What a pool's pods are, for agent-sandbox's warm pool to keep started
/// (the capability's side, in its cluster module).
pub(crate) trait PoolTemplate: Sync {
    /// Opens the warm pool of `size` such pods on `cluster`; `None` keeps
    /// the pool's own items (pods whose objects are each their own: an
    /// allow-list, secrets).
    fn agent_pool<'a>(
        &'a self,
        cluster: &'a Cluster,
        size: usize,
    ) -> impl Future<Output = Result<Option<AgentPool>>> + Send + 'a;
}

/// The warm pool a pool's takes claim from on a cluster that uses
/// agent-sandbox ([`KubeConfig::agent_sandbox`](crate::KubeConfig::agent_sandbox)).
pub(crate) async fn agent_pool<T: PoolTemplate>(
    cluster: &Cluster,
    template: &T,
    size: usize,
) -> Result<super::Claims> {
    if size == 0 || !cluster.uses_agent_sandbox().await? {
        return Ok(None);
    }
    Ok(template
        .agent_pool(cluster, size)
        .await?
        .map(std::sync::Arc::new))
}

/// How long the backend lets a program go without answering before the
/// handshake greets it again.
const REGREET_EVERY: Duration = Duration::from_millis(500);

/// What a start that takes too long on a cluster is most often waiting for.
const SLOW_HINT: &str = "is the image pullable? are the namespace's quotas full?";

/// Starts `recipe`'s pod and runs `handshake` with it. Claiming a pod
/// and planning one (the allow-list, the agent's image) come first; making
/// it, waiting for its container, the attach and the handshake are within
/// `limit`, and past it is the scheduler's reason if it could not place
/// the pod, else `too_slow`.
pub(crate) async fn start<R, T, Fut>(
    cluster: &Cluster,
    recipe: &R,
    limit: Duration,
    handshake: impl FnOnce(Started) -> Fut + Send,
    too_slow: impl FnOnce(&str) -> Error,
) -> Result<T>
where
    R: Recipe,
    Fut: Future<Output = Result<T>> + Send,
{
    let pod = recipe.pod()?;
    let (name, coming) = claim_or_plan(cluster, &pod).await?;
    let started = async {
        let held = match coming {
            Coming::Claimed(held) => held,
            Coming::Planned(plan) => {
                let (guard, _uid) = cluster.launch_pod(&plan.pod, &plan.companions).await?;
                Held::Pod(guard)
            }
        };
        cluster
            .wait_running(&name, pod.container, &pod.ended_early)
            .await?;
        let attached = cluster.attach_interactive(&name, pod.container).await?;
        handshake(Started {
            held,
            attached,
            regreet: Some(REGREET_EVERY),
            egress: None,
        })
        .await
    };
    // Kept until the scheduler's reason is read: dropping it deletes the pod.
    let mut started = std::pin::pin!(started);
    match tokio::time::timeout(limit, &mut started).await {
        Ok(result) => result,
        Err(_) => Err(cluster.why_not_started(&name, too_slow(SLOW_HINT)).await),
    }
}

/// A pod claimed from agent-sandbox's warm pool, or one to make.
// One per start, on its stack for a moment: the sizes cost nothing.
#[allow(clippy::large_enum_variant)]
enum Coming {
    Claimed(Held),
    Planned(crate::cluster::PodPlan),
}

/// The pod's name and how it comes: claimed from the recipe's warm pool if
/// one is bound in time, else planned.
async fn claim_or_plan(cluster: &Cluster, pod: &InPod<'_>) -> Result<(String, Coming)> {
    if let Some((claims, wait)) = pod.claims {
        if let Some(claim) = claims.claim(wait).await? {
            let name = claim.pod().to_string();
            return Ok((name, Coming::Claimed(Held::Claim(Box::new(claim)))));
        }
        // None bound in time: a pod of its own.
    }
    let plan = plan(cluster, pod).await?;
    Ok((plan.name.clone(), Coming::Planned(plan)))
}

/// `pod` planned under a name of its own, with its allow-list and, if it
/// takes one, the agent's image.
async fn plan(cluster: &Cluster, pod: &InPod<'_>) -> Result<crate::cluster::PodPlan> {
    let allow = crate::cluster::allow_list(&pod.network).await?;
    let agent = match pod.agent_image {
        true => Some(cluster.agent_image().await?),
        false => None,
    };
    let mut plan = cluster.plan_pod(
        &pod.prefix,
        &pod.image,
        &pod.values,
        pod.network == Network::None,
        |opts| match agent {
            Some(agent) => (pod.render)(&opts.clone().agent_image(agent)),
            None => (pod.render)(opts),
        },
    )?;
    if let Some(list) = allow {
        list.apply(&mut plan);
    }
    Ok(plan)
}

/// A warm pool of `size` pods like `pod` on agent-sandbox (see
/// `cluster::AgentPool`), for a pool's takes to claim from.
pub(crate) async fn agent_pool_of(
    cluster: &Cluster,
    pod: &InPod<'_>,
    size: usize,
) -> Result<AgentPool> {
    let plan = plan(cluster, pod).await?;
    let egress = pod.network != Network::None;
    AgentPool::open(
        cluster,
        plan.pod,
        plan.companions,
        (egress, pod.container),
        size,
    )
    .await
}

/// Waits until container `container` of pod `name` has ended (or the pod is gone).
pub(crate) async fn wait_ended(cluster: &Cluster, name: &str, container: &str) {
    let _ = cluster
        .wait_pod(name, |view| {
            (view.terminated(container).is_some() || view.failure(container).is_some())
                .then_some(Ok(()))
        })
        .await;
}
