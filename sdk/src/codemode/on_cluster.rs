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

/// Starts a code host's pod and waits for its bridge's `ready`, within
/// the start timeout. Returns the runner and the image reference.
pub(super) async fn launch(cluster: &Cluster, how: Launch<'_>) -> Result<(Runner, String)> {
    if !how.mounts.is_empty() {
        return Err(crate::cluster::unsupported(
            "mounted directories on a code host",
            "give the data as inputs or read it through a tool",
        ));
    }
    let reference = cluster.code_host_image(how.image).await?.reference;
    // Always offline: the code is a model's.
    let plan = cluster.plan_pod("dockhand-code-host", &reference, &[], true, |opts| {
        crate::k8s::code_host_pod(&how, opts)
    })?;
    let name = plan.name.clone();
    let limit = how.start_timeout;
    let started = async {
        let (guard, _uid) = cluster.launch_pod(&plan.pod, &plan.companions).await?;
        cluster
            .wait_running(&name, "bridge", |code, reason| Error::CodeHostUnavailable {
                reason: format!(
                    "the bridge ended before it was ready ({reason}, exit {code}); is {reference} a code host image dockhand made?"
                ),
            })
            .await?;
        let attached = cluster.attach_interactive(&name, "bridge").await?;
        let mut runner = Runner::attached(Held::Pod(guard), attached.input, attached.output);
        runner.send(&ToRunner::Hello).await?;
        loop {
            match runner.next().await {
                Some(Ok(FromRunner::Ready { .. })) => return Ok(runner),
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(e),
                None => return Err(bridge_exited(&runner.stderr)),
            }
        }
    };
    match tokio::time::timeout(limit, started).await {
        Ok(Ok(runner)) => Ok((runner, reference)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(Error::CodeHostUnavailable {
            reason: format!(
                "the code host's pod did not become ready within {limit:?} (is the image pullable? are the namespace's quotas full? `CodeHostConfig::start_timeout` allows more)"
            ),
        }),
    }
}
