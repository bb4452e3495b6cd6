//! One attempt of a run as a pod on a Kubernetes cluster: the inputs
//! archive over the `inputs` init container's stdin, the program's log
//! followed while it runs, its end read from the kubelet's status, and
//! `/var/outputs` back as a tar over the `outputs` container's stream.

use std::sync::Arc;
use std::time::Instant;

use futures::AsyncBufReadExt;

use super::attempt::{JobDelivery, Prepared, RunOptions, RunOutput, Warm, WarmPod};
use super::capture::{StreamBuffer, StreamKind};
use super::conclusion::{collect_streamed, conclude, within};
use super::spec::Sandbox;
use super::value::Value;
use crate::backend::Pooled;
use crate::cluster::{AgentPool, Cluster, PodPlan, PodView};
use crate::engine::ExitStatus;
use crate::error::{Error, Result};
use crate::held::Held;
use crate::manifests::{KubeOptions, Manifests};
use crate::settings::Network;

/// `sandbox`'s pod running `command`, as the manifests renderer takes it.
fn shape<'a>(
    sandbox: &'a Sandbox,
    opts: &KubeOptions,
    command: Vec<String>,
) -> crate::manifests::OneShotShape<'a> {
    let rt = &sandbox.runtime;
    crate::manifests::OneShotShape {
        name: &sandbox.name,
        spec: super::launch::container_spec(sandbox, opts.image(), command),
        secrets: &rt.secrets,
        timeout: rt.timeout,
        egress: rt.network != Network::None,
    }
}

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
    crate::manifests::one_shot_job(shape(sandbox, opts, command), opts)
}

/// Refuses, before anything is made, what runs on Docker only.
pub(super) fn check(sandbox: &Sandbox) -> Result<()> {
    crate::cluster::refuse_network(&sandbox.runtime.network, &sandbox.runtime.secrets)
}

/// One of `sandbox`'s pool pods from `image`, planned (see `manifests::warm_one_shot_pod`).
fn plan_warm_pod(cluster: &Cluster, sandbox: &Sandbox, image: &str) -> Result<PodPlan> {
    check(sandbox)?;
    cluster.plan_pod(
        &format!("dockhand-{}", sandbox.name),
        image,
        &[],
        sandbox.runtime.network == Network::None,
        |opts| crate::manifests::warm_one_shot_pod(shape(sandbox, opts, Vec::new()), opts),
    )
}

/// Makes one of `sandbox`'s pool pods from `image` and waits until its
/// `inputs` container runs, so a run that takes it sends its inputs at once.
pub(crate) async fn warm_pod(
    cluster: &Cluster,
    sandbox: &Sandbox,
    image: &str,
    limit: std::time::Duration,
) -> Result<WarmPod> {
    let allow = crate::cluster::allow_list(&sandbox.runtime.network).await?;
    let mut plan = plan_warm_pod(cluster, sandbox, image)?;
    if let Some(list) = allow {
        list.apply(&mut plan);
    }
    let (guard, _uid) = cluster.launch_pod(&plan.pod, &plan.companions).await?;
    match cluster
        .wait_pod_within(&plan.name, limit, inputs_ready)
        .await
    {
        Ok(()) => Ok(WarmPod {
            guard: Held::Pod(guard),
            name: plan.name,
        }),
        Err(e) => {
            if let Err(removal) = guard.remove().await {
                tracing::warn!(error = %removal, "deleting a pool pod that never took inputs");
            }
            Err(e)
        }
    }
}

/// A pool of `sandbox`'s pods from `image` on agent-sandbox (see
/// `cluster::AgentPool`): the pod a pool would make, as a template.
pub(crate) async fn agent_pool(
    cluster: &Cluster,
    sandbox: &Sandbox,
    image: &str,
    size: usize,
) -> Result<AgentPool> {
    let plan = plan_warm_pod(cluster, sandbox, image)?;
    let egress = sandbox.runtime.network != Network::None;
    AgentPool::open(cluster, plan.pod, plan.companions, (egress, "inputs"), size).await
}

/// A step of getting the pod ready, within the pod's start limit: running
/// out of it is the cluster's failure, not the run's timeout.
async fn starting<T>(
    pod: &str,
    limit: std::time::Duration,
    step: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    match step.await {
        Err(Error::Timeout { .. }) => Err(crate::error::ClusterError::PodFailed {
            pod: format!("{pod}-*"),
            reason: "NotReady".into(),
            message: format!(
                "no pod was ready for the run within {limit:?} (KubeConfig::pod_start_limit)"
            ),
        }
        .into()),
        other => other,
    }
}

/// Whether a one-shot pod's `inputs` container runs, i.e. takes its inputs.
fn inputs_ready(view: &PodView<'_>) -> Option<Result<()>> {
    if let Some(failure) = view.failure("program") {
        return Some(Err(failure.into()));
    }
    if view.running("inputs") {
        return Some(Ok(()));
    }
    view.terminated("inputs").map(|(code, reason)| {
        Err(Error::spec(
            "kubernetes",
            format!("the inputs container ended before its inputs came ({reason}, exit {code}); does the image have `tar`?"),
        ))
    })
}

/// A pool's pod that still takes inputs, if the pool has one ready or
/// coming before the deadline; one that died idle is deleted and the run
/// starts cold.
async fn take_warm(
    cluster: &Cluster,
    pool: Option<&Pooled<Warm>>,
    deadline: Option<(tokio::time::Instant, std::time::Duration)>,
) -> Result<Option<WarmPod>> {
    let Some(pool) = pool else {
        return Ok(None);
    };
    let wait = super::attempt::pool_wait(deadline);
    let pod = match &pool.claims {
        Some(claims) => match claims.claim(wait).await? {
            Some(claim) => WarmPod {
                name: claim.pod().to_string(),
                guard: Held::Claim(Box::new(claim)),
            },
            None => return Ok(None),
        },
        None => match pool.warm.take_or_wait(wait).await {
            Some(Warm::Pod(pod)) => *pod,
            _ => return Ok(None),
        },
    };
    match within(deadline, cluster.wait_pod(&pod.name, inputs_ready)).await {
        Ok(()) => Ok(Some(pod)),
        Err(e @ Error::Timeout { .. }) => {
            pod.guard.remove_in_background();
            Err(e)
        }
        Err(e) => {
            tracing::warn!(error = %e, "a pool pod could not take the job; starting cold");
            pod.guard.remove_in_background();
            Ok(None)
        }
    }
}

/// One attempt on `cluster`, in a pool's pod if `pool` has one; the pod is
/// deleted whatever happens.
pub(super) async fn attempt(
    cluster: &Cluster,
    sandbox: &Sandbox,
    prepared: &Prepared,
    number: u32,
    options: &RunOptions,
    pool: Option<&Pooled<Warm>>,
) -> Result<RunOutput> {
    let started = Instant::now();
    let rt = &sandbox.runtime;
    let JobDelivery::Upload { command, tar } = &prepared.job else {
        return Err(Error::spec(
            "kubernetes",
            "a cluster run takes its job as an archive",
        ));
    };
    // Getting the pod ready for its inputs (scheduling, image pull, start)
    // has a limit of its own; the run's timeout starts with the program.
    let start_limit = cluster.pod_start_limit();
    let start = Some((tokio::time::Instant::now() + start_limit, start_limit));

    let secrets: Arc<[(String, String)]> = prepared.redactions.clone().into();
    let handler = options.on_output.clone();
    let mut stdout = StreamBuffer::new(StreamKind::Stdout, sandbox.output_limit, secrets.clone());
    let stderr = StreamBuffer::new(StreamKind::Stderr, sandbox.output_limit, secrets);

    // A pool's pod takes the attempt number before the archive; a pod
    // made now has it in its spec.
    let pods = format!("dockhand-{}", sandbox.name);
    let taken = starting(&pods, start_limit, take_warm(cluster, pool, start)).await?;
    let (guard, name, attempt_line) = match taken {
        Some(pod) => (pod.guard, pod.name, format!("{number}\n")),
        None => {
            let allow = starting(
                &pods,
                start_limit,
                within(start, crate::cluster::allow_list(&rt.network)),
            )
            .await?;
            let mut plan = cluster.plan_pod(
                &pods,
                &prepared.image.reference,
                &prepared.secrets,
                rt.network == Network::None,
                |opts| {
                    crate::manifests::one_shot_pod(
                        shape(sandbox, opts, command.clone()),
                        number,
                        opts,
                    )
                },
            )?;
            if let Some(list) = allow {
                list.apply(&mut plan);
            }
            // The values travel in a Secret object only, never in the pod spec.
            let (guard, _uid) = starting(
                &pods,
                start_limit,
                within(start, cluster.launch_pod(&plan.pod, &plan.companions)),
            )
            .await?;
            (Held::Pod(guard), plan.name, String::new())
        }
    };
    // Inputs first: until they are in, nothing of the program runs.
    let left = start.map_or(start_limit, |(at, _)| {
        at.saturating_duration_since(tokio::time::Instant::now())
    });
    if let Err(e) = cluster.wait_pod_within(&name, left, inputs_ready).await {
        if let Err(removal) = guard.remove().await {
            tracing::warn!(error = %removal, "deleting a pod that never took its inputs");
        }
        return Err(e);
    }
    let deadline = rt
        .timeout
        .map(|limit| (tokio::time::Instant::now() + limit, limit));
    let ran = async {
        let inputs = tokio::io::AsyncReadExt::chain(
            std::io::Cursor::new(attempt_line.into_bytes()),
            tar.reader().await?,
        );
        cluster.send_stdin(&name, "inputs", inputs).await?;
        cluster
            .wait_pod(&name, |p| {
                let view = p;
                if view.running("program") || view.terminated("program").is_some() {
                    return Some(Ok(()));
                }
                view.failure("program").map(|f| Err(f.into()))
            })
            .await?;
        // The kubelet keeps one log per container: stdout and stderr in one stream.
        let mut log = cluster.follow_log(&name, "program").await?;
        loop {
            let piece = log.fill_buf().await.map_err(|e| {
                Error::from(crate::error::ClusterError::Api {
                    operation: "follow log",
                    status: None,
                    reason: "StreamFailed".into(),
                    message: e.to_string(),
                })
            })?;
            if piece.is_empty() {
                break;
            }
            let n = piece.len();
            stdout.push(piece, handler.as_ref());
            log.consume_unpin(n);
        }
        let (code, reason) = cluster
            .wait_pod(&name, |p| {
                let view = p;
                // An evicted or lost pod's program shows an exit too (137):
                // the cluster's reason comes first, it is the truth.
                if let Some(failure) = view.failure("program") {
                    return Some(Err(failure.into()));
                }
                view.terminated("program").map(Ok)
            })
            .await?;
        let status = ExitStatus {
            code: i64::from(code),
            oom_killed: reason == "OOMKilled",
            gone: false,
        };
        let tar = cluster.start_printing(&name, "outputs").await?;
        let collected = collect_streamed(tar, &sandbox.outputs, rt.outputs_limit).await?;
        Ok::<_, Error>((status, collected))
    };
    let (status, collected) = match within(deadline, ran).await {
        Ok(done) => {
            guard.remove_in_background();
            done
        }
        Err(Error::Timeout { timeout, .. }) => {
            guard.remove_in_background();
            let (out, err) = (
                stdout.finish(handler.as_ref()),
                stderr.finish(handler.as_ref()),
            );
            return Err(Error::Timeout {
                timeout,
                stdout: out.text,
                stderr: err.text,
            });
        }
        Err(e) => {
            if let Err(removal) = guard.remove().await {
                tracing::warn!(error = %removal, "deleting a failed run's pod");
            }
            return Err(e);
        }
    };
    let stdout = stdout.finish(handler.as_ref());
    let stderr = stderr.finish(handler.as_ref());
    conclude(
        sandbox,
        prepared,
        &status,
        collected,
        (stdout, stderr),
        started,
    )
}
