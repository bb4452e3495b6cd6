//! A code host as a pod on a Kubernetes cluster: the compiled bridge in a
//! code host image the nodes pull, spoken to over the `bridge` container's
//! attach stream (there is no socket of this machine's to offer a pod).
//!
//! The bridge starts before anyone can attach, so its first `ready` goes
//! to the kubelet's log: the host asks again with `hello`.

use super::bridge::{bridge_exited, Launch, Runner};
use super::protocol::{FromRunner, ToRunner};
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::held::Held;
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

/// Starts a code host's pod and waits for its bridge's `ready`, within
/// the start timeout. Returns the runner and the image reference.
pub(super) async fn launch(cluster: &Cluster, how: Launch<'_>) -> Result<(Runner, String)> {
    refuse_mounts(&how)?;
    let reference = cluster.code_host_image(how.image).await?.reference;
    if let Some(claims) = how.claims {
        // Half the start's time at most, so one made here still fits.
        let wait = crate::warm::WAIT_LIMIT.min(how.start_timeout / 2);
        if let Some(claim) = claims.claim(wait).await? {
            let name = claim.pod().to_string();
            let held = Held::Claim(Box::new(claim));
            return ready(cluster, &how, name, reference, async { Ok(held) }).await;
        }
        // None bound in time: a pod of its own.
    }
    let plan = plan(cluster, &how, &reference)?;
    let name = plan.name.clone();
    let launched = async {
        let (guard, _uid) = cluster.launch_pod(&plan.pod, &plan.companions).await?;
        Ok(Held::Pod(guard))
    };
    ready(cluster, &how, name, reference, launched).await
}

/// Waits for the bridge of pod `name` (made by `held`, or already held),
/// attaches to it and waits for its `ready`, all within the start timeout.
/// How long the backend waits for the bridge's `ready` before greeting it again.
const REGREET_EVERY: std::time::Duration = std::time::Duration::from_millis(500);

async fn ready(
    cluster: &Cluster,
    how: &Launch<'_>,
    name: String,
    reference: String,
    held: impl std::future::Future<Output = Result<Held>>,
) -> Result<(Runner, String)> {
    let limit = how.start_timeout;
    let started = async {
        let held = held.await?;
        cluster
            .wait_running(&name, "bridge", |code, reason| Error::CodeHostUnavailable {
                reason: format!(
                    "the bridge ended before it was ready ({reason}, exit {code}); is {reference} a code host image dockhand made?"
                ),
            })
            .await?;
        let attached = cluster.attach_interactive(&name, "bridge").await?;
        let mut runner = Runner::attached(held, attached.input, attached.output);
        runner.send(&ToRunner::Hello).await?;
        loop {
            // The attach wires stdout after stdin (containerd): an answer
            // can miss the stream, so the hello is repeated until one arrives.
            let Ok(next) = tokio::time::timeout(REGREET_EVERY, runner.next()).await else {
                runner.send(&ToRunner::Hello).await?;
                continue;
            };
            match next {
                Some(Ok(FromRunner::Ready { .. })) => return Ok(runner),
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e),
                None => return Err(bridge_exited(&runner.stderr)),
            }
        }
    };
    // Kept until the scheduler's reason is read: dropping it deletes the pod.
    let mut started = std::pin::pin!(started);
    match tokio::time::timeout(limit, &mut started).await {
        Ok(Ok(runner)) => Ok((runner, reference.clone())),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(cluster
            .why_not_started(
                &name,
                Error::CodeHostUnavailable {
                    reason: format!(
                        "the code host's pod did not become ready within {limit:?} (is the image pullable? are the namespace's quotas full? `CodeHostConfig::start_timeout` allows more)"
                    ),
                },
            )
            .await),
    }
}

/// A pool of code hosts launched as `how` says on agent-sandbox (see
/// `cluster::AgentPool`): the pod a code host would make, as a template.
pub(crate) async fn agent_pool(
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

/// The code host's pod from `reference`: always offline (the code is a model's).
fn plan(cluster: &Cluster, how: &Launch<'_>, reference: &str) -> Result<crate::cluster::PodPlan> {
    cluster.plan_pod("dockhand-code-host", reference, &[], true, |opts| {
        crate::manifests::code_host_pod(super::bridge::host_spec(how, opts.image())?, opts)
    })
}
