//! A one-shot attempt as a pod on a Kubernetes cluster: the inputs
//! archive over the `inputs` init container's stdin, the program's log
//! followed while it runs, its end read from the kubelet's status, and
//! `/var/outputs` back as a tar over the `outputs` container's stream.

use futures::{AsyncBufReadExt, FutureExt};

use super::one_shot::{
    within, InputsTar, JobDelivery, Launched, OneShot, OneShotShape, Warm, WarmOneShot, WarmPod,
};
use super::Held;
use crate::cluster::{AgentPool, Cluster, PodPlan, PodView};
use crate::engine::{ExitStatus, LogChunk};
use crate::error::{ClusterError, Error, Result};
use crate::manifests::KubeOptions;
use crate::settings::Network;

pub(super) use crate::cluster::refuse_network;

/// The pod's shape as the manifests renderer takes it, from `opts`' image,
/// running `command`.
pub(crate) fn render_shape<'a>(
    shape: &OneShotShape<'a>,
    opts: &KubeOptions,
    command: Vec<String>,
) -> crate::manifests::OneShotShape<'a> {
    let mut spec = shape.spec.clone();
    spec.image = opts.image().to_string();
    spec.cmd = command;
    crate::manifests::OneShotShape {
        name: shape.name,
        spec,
        secrets: shape.secrets,
        timeout: shape.timeout,
        egress: *shape.network != Network::None,
    }
}

/// One of the pool pods of `shape`, planned (see `manifests::warm_one_shot_pod`).
fn plan_warm_pod(cluster: &Cluster, shape: &OneShotShape<'_>) -> Result<PodPlan> {
    crate::cluster::refuse_network(shape.network, shape.secrets)?;
    cluster.plan_pod(
        &format!("dockhand-{}", shape.name),
        &shape.spec.image,
        &[],
        *shape.network == Network::None,
        |opts| crate::manifests::warm_one_shot_pod(render_shape(shape, opts, Vec::new()), opts),
    )
}

/// Makes one of the pool pods and waits until its `inputs` container
/// runs, so a run that takes it sends its inputs at once.
pub(super) async fn warm(cluster: &Cluster, plan: &WarmOneShot<'_>) -> Result<Warm> {
    let allow = crate::cluster::allow_list(plan.shape.network).await?;
    let mut pod = plan_warm_pod(cluster, &plan.shape)?;
    if let Some(list) = allow {
        list.apply(&mut pod);
    }
    let (guard, _uid) = cluster.launch_pod(&pod.pod, &pod.companions).await?;
    match cluster
        .wait_pod_within(&pod.name, plan.limit, inputs_ready)
        .await
    {
        Ok(()) => Ok(Warm::Pod(Box::new(WarmPod {
            guard: Held::Pod(guard),
            name: pod.name,
        }))),
        Err(e) => {
            if let Err(removal) = guard.remove().await {
                tracing::warn!(error = %removal, "deleting a pool pod that never took inputs");
            }
            Err(e)
        }
    }
}

/// A pool of `shape`'s pods on agent-sandbox (see `cluster::AgentPool`):
/// the pod a pool would make, as a template.
pub(crate) async fn agent_pool(
    cluster: &Cluster,
    shape: &OneShotShape<'_>,
    size: usize,
) -> Result<AgentPool> {
    let plan = plan_warm_pod(cluster, shape)?;
    let egress = *shape.network != Network::None;
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
        Err(Error::Timeout { .. }) => Err(ClusterError::PodFailed {
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
    plan: &OneShot<'_>,
    deadline: Option<(tokio::time::Instant, std::time::Duration)>,
) -> Result<Option<WarmPod>> {
    let Some(pool) = plan.pool else {
        return Ok(None);
    };
    let wait = super::one_shot::pool_wait(deadline);
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

/// Launches one attempt on `cluster`, in a pool's pod if the plan's pool
/// has one. Getting the pod ready for its inputs (scheduling, image pull,
/// start) has a limit of its own; the run's time limit starts once the
/// inputs are sent.
pub(super) async fn launch<'a>(cluster: &'a Cluster, plan: &OneShot<'_>) -> Result<Launched<'a>> {
    let (shape, number) = (&plan.shape, plan.number);
    let JobDelivery::Upload { command, tar } = plan.job else {
        return Err(Error::spec(
            "kubernetes",
            "a cluster run takes its job as an archive",
        ));
    };
    let start_limit = cluster.pod_start_limit();
    let start = Some((tokio::time::Instant::now() + start_limit, start_limit));

    // A pool's pod takes the attempt number before the archive; a pod
    // made now has it in its spec.
    let pods = format!("dockhand-{}", shape.name);
    let taken = starting(&pods, start_limit, take_warm(cluster, plan, start)).await?;
    let (held, name, attempt_line) = match taken {
        Some(pod) => (pod.guard, pod.name, format!("{number}\n")),
        None => {
            let allow = starting(
                &pods,
                start_limit,
                within(start, crate::cluster::allow_list(shape.network)),
            )
            .await?;
            let mut pod = cluster.plan_pod(
                &pods,
                &shape.spec.image,
                plan.values,
                *shape.network == Network::None,
                |opts| {
                    let shape = render_shape(shape, opts, command.clone());
                    crate::manifests::one_shot_pod(shape, number, opts)
                },
            )?;
            if let Some(list) = allow {
                list.apply(&mut pod);
            }
            // The values travel in a Secret object only, never in the pod spec.
            let (guard, _uid) = starting(
                &pods,
                start_limit,
                within(start, cluster.launch_pod(&pod.pod, &pod.companions)),
            )
            .await?;
            (Held::Pod(guard), pod.name, String::new())
        }
    };
    // Inputs first: until they are in, nothing of the program runs.
    let left = start.map_or(start_limit, |(at, _)| {
        at.saturating_duration_since(tokio::time::Instant::now())
    });
    if let Err(e) = cluster.wait_pod_within(&name, left, inputs_ready).await {
        if let Err(removal) = held.remove().await {
            tracing::warn!(error = %removal, "deleting a pod that never took its inputs");
        }
        return Err(e);
    }
    let deadline = shape
        .timeout
        .map(|limit| (tokio::time::Instant::now() + limit, limit));
    let started = async {
        let inputs = tokio::io::AsyncReadExt::chain(
            std::io::Cursor::new(attempt_line.into_bytes()),
            reader(tar).await?,
        );
        cluster.send_stdin(&name, "inputs", inputs).await?;
        cluster
            .wait_pod(&name, |view| {
                if view.running("program") || view.terminated("program").is_some() {
                    return Some(Ok(()));
                }
                view.failure("program").map(|f| Err(f.into()))
            })
            .await?;
        cluster.follow_log(&name, "program").await
    };
    let log = match within(deadline, started).await {
        Ok(log) => log,
        Err(e) => {
            if matches!(e, Error::Timeout { .. }) {
                held.remove_in_background();
            } else if let Err(removal) = held.remove().await {
                tracing::warn!(error = %removal, "deleting a failed run's pod");
            }
            return Err(e);
        }
    };
    // The kubelet keeps one log per container: stdout and stderr in one stream.
    let output = futures::stream::unfold(log, |mut log| async move {
        let piece = match log.fill_buf().await {
            Ok([]) => return None,
            Ok(piece) => bytes::Bytes::copy_from_slice(piece),
            Err(e) => {
                let failed = ClusterError::Api {
                    operation: "follow log",
                    status: None,
                    reason: "StreamFailed".into(),
                    message: e.to_string(),
                };
                return Some((Err(failed.into()), log));
            }
        };
        log.consume_unpin(piece.len());
        Some((Ok(LogChunk::Stdout(piece)), log))
    });
    let exit = async move {
        let (code, reason) = cluster
            .wait_pod(&name, |view| {
                // An evicted or lost pod's program shows an exit too (137):
                // the cluster's reason comes first, it is the truth.
                if let Some(failure) = view.failure("program") {
                    return Some(Err(failure.into()));
                }
                view.terminated("program").map(Ok)
            })
            .await?;
        Ok(ExitStatus {
            code: i64::from(code),
            oom_killed: reason == "OOMKilled",
            gone: false,
        })
    };
    Ok(Launched {
        held,
        output: Box::pin(output),
        exit: exit.boxed(),
        output_ends: true,
        deadline,
        egress: None,
        _stdin: None,
    })
}

/// The archive as a byte stream (a cluster's attach stream takes it so).
async fn reader(tar: &InputsTar) -> Result<std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>> {
    Ok(match tar {
        InputsTar::Memory(tar) => Box::pin(std::io::Cursor::new(tar.clone())),
        InputsTar::Spooled(path) => Box::pin(
            tokio::fs::File::open(path.to_path_buf())
                .await
                .map_err(|e| Error::io("reading the spooled inputs archive", e))?,
        ),
    })
}

/// The outputs archive of pod `name`, streamed by its `outputs` container.
pub(super) async fn outputs(cluster: &Cluster, name: &str) -> Result<Option<super::ByteStream>> {
    let tar = cluster.start_printing(name, "outputs").await?;
    Ok(Some(Box::pin(tar)))
}
