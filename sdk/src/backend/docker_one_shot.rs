//! A one-shot attempt on Docker: a pool's warm container handed its job,
//! or a container made for it (its extras: the attempt number, the inline
//! job, secrets, the way out), attached before its start so nothing it
//! prints is missed.

use bytes::Bytes;
use futures::FutureExt;

use super::one_shot::{
    pool_wait, within, JobDelivery, Launched, OneShot, Warm, WarmContainer, WarmOneShot,
    INLINE_JOB_ENV, INPUTS_DIR, OUTPUTS_DIR,
};
use super::Held;
use crate::engine::{Attached, ContainerGuard, ContainerSpec, Engine};
use crate::error::{Error, Result};
use crate::settings::{SecretMount, SECRETS_DIR};

/// The container of a cold attempt: the command itself, the attempt number
/// and secrets in its environment.
fn cold_spec(plan: &OneShot<'_>, lease: Option<&crate::gateway::Lease>) -> ContainerSpec {
    let mut spec = plan.shape.spec.clone();
    spec.env.push(format!("DOCKHAND_ATTEMPT={}", plan.number));
    if let JobDelivery::Inline { job, .. } = plan.job {
        spec.env.push(format!("{INLINE_JOB_ENV}={job}"));
    }
    for (s, (name, value)) in plan.shape.secrets.iter().zip(plan.values) {
        if s.mount == SecretMount::Env {
            spec.env.push(format!("{name}={value}"));
        }
    }
    if plan.secrets_tar.is_some() {
        spec.scratch_volumes.push(SECRETS_DIR.to_string());
    }
    if let Some(lease) = lease {
        lease.apply(&mut spec);
    }
    spec
}

/// Gives a warm container its job: the attempt number on its stdin, which
/// starts it, with the inline job on the same line, or after uploading the
/// inputs (with the command to run).
async fn hand_over(
    engine: &Engine,
    container: &ContainerGuard,
    attached: Attached,
    plan: &OneShot<'_>,
) -> Result<Attached> {
    use tokio::io::AsyncWriteExt;
    let number = plan.number;
    // An inline job goes on the handover line itself; anything else is
    // uploaded first (see `inputs::inline_job`).
    let line = match plan.job {
        JobDelivery::Inline { job, .. } => format!("{number} {job}\n"),
        JobDelivery::Upload { tar, .. } => {
            tar.upload(engine, container.id(), INPUTS_DIR).await?;
            format!("{number}\n")
        }
    };
    let mut attached = attached;
    let go = async {
        attached.input.write_all(line.as_bytes()).await?;
        attached.input.flush().await
    };
    go.await.map_err(|e| Error::Docker {
        operation: "hand a job to a warm container",
        message: e.to_string(),
        status: None,
    })?;
    Ok(attached)
}

/// Launches one attempt: a warm container of the plan's pool handed the
/// job, or a fresh one made for it. The time limit counts from here: a
/// call with `.timeout(t)` answers within `t` however long the daemon
/// takes to create and start.
pub(super) async fn launch<'a>(engine: &'a Engine, plan: &OneShot<'_>) -> Result<Launched<'a>> {
    let deadline = plan
        .shape
        .timeout
        .map(|limit| (tokio::time::Instant::now() + limit, limit));
    let taken = match plan.pool {
        Some(pool) => pool.warm.take_or_wait(pool_wait(deadline)).await,
        None => None,
    };
    if let Some(Warm::Container(warm)) = taken {
        let WarmContainer {
            container,
            attached,
            egress,
        } = *warm;
        match within(deadline, hand_over(engine, &container, attached, plan)).await {
            Ok(attached) => {
                return Ok(launched(
                    engine,
                    container,
                    attached.output,
                    Some(attached.input),
                    egress,
                    deadline,
                ))
            }
            Err(e @ Error::Timeout { .. }) => {
                container.remove_in_background();
                return Err(e);
            }
            // Nothing ran yet: a warm container that died idle costs a cold start, not the run.
            Err(e) => {
                tracing::warn!(error = %e, "a warm container could not take the job; starting cold");
                container.remove_in_background();
            }
        }
    }
    // A pooled run that starts cold makes its own way out.
    let mut cold_egress = None;
    if plan.egress.is_none() {
        if let crate::Network::Egress(policy) = plan.shape.network {
            let opened = open_lease(plan.gateway, policy);
            cold_egress = Some(within(deadline, opened).await?);
        }
    }
    let lease = plan.egress.or(cold_egress.as_ref());
    let spec = cold_spec(plan, lease);
    let container = within(deadline, engine.create_container(&spec)).await?;
    let id = container.id().to_string();
    let start = async {
        let uploads = async {
            if let JobDelivery::Upload { tar, .. } = plan.job {
                tar.upload(engine, &id, INPUTS_DIR).await?;
            }
            if plan.shape.needs_outputs_dir {
                engine
                    .upload_archive(&id, OUTPUTS_DIR, writable_root()?)
                    .await?;
            }
            if let Some(tar) = plan.secrets_tar {
                engine.upload_archive(&id, SECRETS_DIR, tar.clone()).await?;
            }
            if let Some(lease) = lease {
                lease.install(engine, &id).await?;
            }
            Ok::<_, Error>(())
        };
        // Independent requests: one round trip instead of two.
        let ((), output) = tokio::try_join!(uploads, engine.attach_output(&id))?;
        engine.start_container(&id).await?;
        Ok(output)
    };
    match within(deadline, start).await {
        Ok(output) => Ok(launched(
            engine,
            container,
            output,
            None,
            cold_egress,
            deadline,
        )),
        Err(e) => {
            if matches!(e, Error::Timeout { .. }) {
                container.remove_in_background();
            } else if let Err(removal) = container.remove().await {
                tracing::warn!(error = %removal, "removing a container that did not start");
            }
            Err(e)
        }
    }
}

fn launched<'a>(
    engine: &'a Engine,
    container: ContainerGuard,
    output: super::one_shot::OutputStream,
    stdin: Option<std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>>,
    egress: Option<crate::gateway::Lease>,
    deadline: Option<(tokio::time::Instant, std::time::Duration)>,
) -> Launched<'a> {
    let id = container.id().to_string();
    Launched {
        held: Held::Container(container),
        output,
        exit: async move { engine.wait_container(&id).await }.boxed(),
        output_ends: false,
        deadline,
        egress,
        _stdin: stdin,
    }
}

/// The outputs archive of container `id`, streamed; a container that is
/// gone is the run's [`Error::ContainerGone`].
pub(super) async fn outputs(engine: &Engine, id: &str) -> Result<Option<super::ByteStream>> {
    match engine.download_stream(id, OUTPUTS_DIR).await? {
        Some(stream) => Ok(Some(Box::pin(stream))),
        None if !engine.container_exists(id).await? => Err(Error::ContainerGone { id: id.into() }),
        None => Ok(None),
    }
}

/// A way out under `policy` for one container, through the gateway `access` reaches.
async fn open_lease(
    access: Option<crate::gateway::Access<'_>>,
    policy: &crate::Egress,
) -> Result<crate::gateway::Lease> {
    let access = access
        .ok_or_else(|| Error::spec("network", "an egress policy needs the egress gateway"))?;
    crate::gateway::Lease::open(access, policy, Vec::new()).await
}

/// An empty directory anyone may write, for an image's missing /var/outputs.
fn writable_root() -> Result<Bytes> {
    Ok(Bytes::from(crate::archive::build_tar(
        &[(".", 0o777)],
        &[],
    )?))
}

/// Creates, attaches and starts one container that waits for its job.
pub(super) async fn warm(engine: &Engine, plan: &WarmOneShot<'_>) -> Result<Warm> {
    let limit = plan.limit;
    match tokio::time::timeout(limit, warm_container(engine, plan)).await {
        Ok(made) => Ok(Warm::Container(Box::new(made?))),
        Err(_) => Err(Error::Docker {
            operation: "start a warm container",
            message: format!("it was not running within {limit:?}"),
            status: None,
        }),
    }
}

async fn warm_container(engine: &Engine, plan: &WarmOneShot<'_>) -> Result<WarmContainer> {
    let mut spec = plan.shape.spec.clone();
    spec.cmd = plan.waiter.clone();
    spec.open_stdin = true;
    spec.env.extend(plan.waiter_env.iter().cloned());
    spec.extra_labels
        .insert("dev.dockhand.pool".into(), plan.shape.name.to_string());
    // Under a policy: the container's own network and registration, made
    // with it, so that its run starts with its way out ready.
    let egress = match plan.shape.network {
        crate::Network::Egress(policy) => {
            let lease = open_lease(plan.gateway, policy).await?;
            lease.apply(&mut spec);
            Some(lease)
        }
        _ => None,
    };
    let container = engine.create_container(&spec).await?;
    let id = container.id().to_string();
    let started = async {
        if let Some(lease) = &egress {
            lease.install(engine, &id).await?;
        }
        if plan.shape.needs_outputs_dir {
            engine
                .upload_archive(&id, OUTPUTS_DIR, writable_root()?)
                .await?;
        }
        // Attached before the start, so nothing the program says is missed
        // and the handover is a write on a stream already open.
        let attached = engine.attach(&id).await?;
        engine.start_container(&id).await?;
        Ok(attached)
    };
    match started.await {
        Ok(attached) => Ok(WarmContainer {
            container,
            attached,
            egress,
        }),
        Err(e) => {
            let _ = container.remove().await;
            Err(e)
        }
    }
}
