//! An attempt on Docker: the spec every container of a sandbox shares, a
//! cold one's extras, handing a job to a warm one, and the attempt itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;

use super::attempt::{
    pool_wait, JobDelivery, Prepared, RunOptions, RunOutput, Warm, WarmContainer,
};
use super::capture::{OutputHandler, StreamBuffer, StreamKind};
use super::conclusion::{collect_streamed, conclude, within};
use super::frame::RunnerEnds;
use super::inputs;
use super::inputs::INLINE_JOB_ENV;
use super::outputs;
use super::preamble::{INPUTS_DIR, OUTPUTS_DIR};
use super::spec::Sandbox;
use crate::backend::Pooled;
use crate::client::Client;
use crate::engine::ExitStatus;
use crate::engine::{Attached, ContainerGuard, ContainerSpec, Engine, LogChunk};
use crate::error::{Error, Result};
use crate::settings::confine;
use crate::settings::SecretMount;
use crate::settings::SECRETS_DIR;

/// The container of a cold attempt: the command itself, the attempt number
/// and secrets in its environment.
pub(super) fn cold_spec(
    sandbox: &Sandbox,
    prepared: &Prepared,
    lease: Option<&crate::gateway::Lease>,
    number: u32,
) -> ContainerSpec {
    let rt = &sandbox.runtime;
    let (JobDelivery::Inline { command, .. } | JobDelivery::Upload { command, .. }) = &prepared.job;
    let mut spec = container_spec(sandbox, &prepared.image.reference, command.clone());
    spec.env.push(format!("DOCKHAND_ATTEMPT={number}"));
    if let JobDelivery::Inline { job, .. } = &prepared.job {
        spec.env.push(format!("{INLINE_JOB_ENV}={job}"));
    }
    for (s, (name, value)) in rt.secrets.iter().zip(&prepared.secrets) {
        if s.mount == SecretMount::Env {
            spec.env.push(format!("{name}={value}"));
        }
    }
    if prepared.secrets_tar.is_some() {
        spec.scratch_volumes.push(SECRETS_DIR.to_string());
    }
    if let Some(lease) = lease {
        lease.apply(&mut spec);
    }
    spec
}

/// What every container of `sandbox` is made with, cold or warm.
pub(crate) fn container_spec(sandbox: &Sandbox, image: &str, cmd: Vec<String>) -> ContainerSpec {
    let rt = &sandbox.runtime;
    let mut env = vec!["HOME=/tmp".to_string(), "PYTHONUNBUFFERED=1".to_string()];
    env.extend(rt.env.iter().map(|(k, v)| format!("{k}={v}")));
    let mut spec = ContainerSpec {
        image: image.to_string(),
        cmd,
        entrypoint: Some(Vec::new()),
        env,
        working_dir: Some("/tmp".into()),
        kind: "sandbox",
        extra_labels: [("dev.dockhand.sandbox".to_string(), sandbox.name.clone())].into(),
        scratch_volumes: vec![INPUTS_DIR.to_string(), OUTPUTS_DIR.to_string()],
        init: true,
        // Output is read raw through attach; a log would only cost disk.
        no_log: true,
        ..Default::default()
    };
    confine(&mut spec, &rt.resources, &rt.hardening, &rt.network);
    spec.runtime = rt.isolation.runtime_name().map(String::from);
    // No single file can outgrow what would be refused at collection
    // anyway, so a runaway writer stops inside instead of filling the disk.
    spec.max_file_bytes = Some(i64::try_from(rt.outputs_limit).unwrap_or(i64::MAX));
    spec
}

type OutputStream = std::pin::Pin<Box<dyn futures::Stream<Item = Result<LogChunk>> + Send>>;
type Stdin = std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>;

/// Gives a warm container its job: the attempt number on its stdin, which
/// starts it, with the inline job on the same line, or after uploading the
/// inputs (with the command to run). The stdin is kept open until the run
/// ends (the program itself reads an empty one).
pub(super) async fn hand_over(
    engine: &Engine,
    container: &ContainerGuard,
    attached: Attached,
    prepared: &Prepared,
    number: u32,
) -> Result<(OutputStream, Stdin)> {
    use tokio::io::AsyncWriteExt;
    // An inline job goes on the handover line itself; anything else is
    // uploaded first (see `inputs::inline_job`).
    let line = match &prepared.job {
        JobDelivery::Inline { job, .. } => format!("{number} {job}\n"),
        JobDelivery::Upload { tar, .. } => {
            tar.upload(engine, container.id(), INPUTS_DIR).await?;
            format!("{number}\n")
        }
    };
    let mut stdin = attached.input;
    let go = async {
        stdin.write_all(line.as_bytes()).await?;
        stdin.flush().await
    };
    go.await.map_err(|e| Error::Docker {
        operation: "hand a job to a warm container",
        message: e.to_string(),
        status: None,
    })?;
    Ok((attached.output, stdin))
}

/// One attempt on Docker: a warm container of `pool` handed the job, or a
/// fresh one made for it; inputs in, the program's output streamed, outputs
/// read back, and the container removed whatever happens.
pub(super) async fn attempt_on_docker(
    client: &Client,
    sandbox: &Sandbox,
    prepared: &Prepared,
    number: u32,
    options: &RunOptions,
    pool: Option<&Pooled<Warm>>,
) -> Result<RunOutput> {
    let started = Instant::now();
    let engine = client.engine()?;
    let rt = &sandbox.runtime;
    // The time limit counts from here: a call with `.timeout(t)` answers
    // within `t` however long the daemon takes to create and start.
    let deadline = rt
        .timeout
        .map(|limit| (tokio::time::Instant::now() + limit, limit));
    // The way out of this attempt's container, kept until the attempt
    // ends (its drop lets the network go in the background).
    let mut warm_egress = None;
    let mut cold_egress = None;
    let taken = match pool {
        Some(pool) => pool.warm.take_or_wait(pool_wait(deadline)).await,
        None => None,
    };
    let warm = match taken {
        Some(Warm::Container(warm)) => {
            let WarmContainer {
                container,
                attached,
                egress,
            } = *warm;
            // Until the attempt ends: the container's network and policy.
            warm_egress = egress;
            let handed = hand_over(engine, &container, attached, prepared, number);
            match within(deadline, handed).await {
                Ok(attached) => Some((container, attached)),
                Err(e @ Error::Timeout { .. }) => {
                    container.remove_in_background();
                    return Err(e);
                }
                // Nothing ran yet: a warm container that died idle costs a cold start, not the run.
                Err(e) => {
                    tracing::warn!(error = %e, "a warm container could not take the job; starting cold");
                    container.remove_in_background();
                    None
                }
            }
        }
        // A pool's pods run on the cluster they were made on.
        Some(Warm::Pod(_)) => None,
        None => None,
    };
    let (container, mut output, _stdin) = match warm {
        Some((container, (output, stdin))) => (container, output, Some(stdin)),
        None => {
            // A pooled run that starts cold makes its own way out.
            if prepared.egress.is_none() {
                if let crate::Network::Egress(policy) = &rt.network {
                    let opened =
                        crate::gateway::Lease::open(client.gateway_access()?, policy, Vec::new());
                    cold_egress = Some(within(deadline, opened).await?);
                }
            }
            let lease = prepared.egress.as_ref().or(cold_egress.as_ref());
            let spec = cold_spec(sandbox, prepared, lease, number);
            let container = within(deadline, engine.create_container(&spec)).await?;
            let id = container.id().to_string();
            let launch = async {
                let uploads = async {
                    if let JobDelivery::Upload { tar, .. } = &prepared.job {
                        tar.upload(engine, &id, INPUTS_DIR).await?;
                    }
                    if prepared.needs_outputs_dir {
                        let tar = Bytes::from(inputs::writable_root()?);
                        engine.upload_archive(&id, OUTPUTS_DIR, tar).await?;
                    }
                    if let Some(tar) = &prepared.secrets_tar {
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
            match within(deadline, launch).await {
                Ok(output) => (container, output, None),
                Err(e) => {
                    if matches!(e, Error::Timeout { .. }) {
                        container.remove_in_background();
                    } else if let Err(removal) = container.remove().await {
                        tracing::warn!(error = %removal, "removing a container that did not start");
                    }
                    return Err(e);
                }
            }
        }
    };
    // Every way out below ends here, so the container is removed on the
    // async path (a blocking drop could stall the connections the daemon
    // still needs to finish with it); the guard's drop is for cancellation.
    let ran = async {
        let id = container.id().to_string();
        // Lines and captures are redacted in the buffers, before any cut.
        let handler = options.on_output.clone();
        let handler = handler.as_ref();
        let secrets: Arc<[(String, String)]> = prepared.redactions.clone().into();
        let limit = sandbox.output_limit;
        let mut stdout = StreamBuffer::new(StreamKind::Stdout, limit, secrets.clone());
        let mut stderr = StreamBuffer::new(StreamKind::Stderr, limit, secrets);
        // With a frame, the answer need not wait for the exit: see `RunnerEnds`.
        let mut ends = prepared.frame_marker.as_deref().map(RunnerEnds::new);
        let run = async {
            let mut wait = std::pin::pin!(engine.wait_container(&id));
            let mut take = |chunk: Result<LogChunk>| -> Result<bool> {
                let (buffer, kind, bytes) = match chunk? {
                    LogChunk::Stdout(b) => (&mut stdout, StreamKind::Stdout, b),
                    LogChunk::Stderr(b) => (&mut stderr, StreamKind::Stderr, b),
                };
                match &mut ends {
                    Some(ends) => buffer.push(&ends.feed(kind, &bytes), handler),
                    None => buffer.push(&bytes, handler),
                }
                Ok(ends.as_ref().is_some_and(RunnerEnds::both_ended))
            };
            let status = loop {
                tokio::select! {
                    status = &mut wait => break status?,
                    chunk = output.next() => match chunk {
                        Some(chunk) => if take(chunk)? {
                            tracing::debug!(container = %id, "the runner's frame ended the run");
                            return Ok(ExitStatus { code: 0, oom_killed: false, gone: false });
                        },
                        None => break wait.await?,
                    },
                }
            };
            // The attach stream may stay open after the exit (bollard #251):
            // take what is still buffered, then stop.
            while let Ok(Some(chunk)) =
                tokio::time::timeout(Duration::from_millis(200), output.next()).await
            {
                take(chunk)?;
            }
            Ok::<_, Error>(status)
        };
        let status = match deadline {
            None => run.await?,
            Some((at, limit)) => match tokio::time::timeout_at(at, run).await {
                Ok(status) => status?,
                Err(_) => {
                    finish_ends(ends.take(), &mut stdout, &mut stderr, handler);
                    let (out, err) = (stdout.finish(handler), stderr.finish(handler));
                    return Err(Error::Timeout {
                        timeout: limit,
                        stdout: out.text,
                        stderr: err.text,
                    });
                }
            },
        };
        let frame = finish_ends(ends.take(), &mut stdout, &mut stderr, handler);
        let stdout = stdout.finish(handler);
        let stderr = stderr.finish(handler);

        if status.gone {
            return Err(Error::ContainerGone { id });
        }
        // A whole frame from a clean exit stands for the download.
        let framed = frame
            .filter(|_| status.code == 0 && !status.oom_killed)
            .and_then(|f| outputs::from_frame(&f, &sandbox.outputs, rt.outputs_limit));
        if let Some(collected) = framed {
            tracing::debug!(container = %id, "outputs taken from the runner's frame, none downloaded");
            return Ok::<_, Error>((status, stdout, stderr, collected));
        }
        let collected = match engine.download_stream(&id, OUTPUTS_DIR).await? {
            Some(stream) => {
                collect_streamed(stream, &sandbox.outputs, rt.outputs_limit).await?
            }
            None if !engine.container_exists(&id).await? => {
                return Err(Error::ContainerGone { id });
            }
            None => outputs::collect(std::io::empty(), &sandbox.outputs, rt.outputs_limit)?,
        };
        Ok::<_, Error>((status, stdout, stderr, collected))
    }
    .await;
    let (status, stdout, stderr, collected) = match ran {
        Ok(ran) => {
            // The outputs are out: answer now and remove on a thread of
            // its own (still certain: the guard removes it or says why).
            container.remove_in_background();
            ran
        }
        Err(e @ Error::Timeout { .. }) => {
            // Answer at the limit; the container goes in the background.
            container.remove_in_background();
            return Err(e);
        }
        Err(e) => {
            if let Err(removal) = container.remove().await {
                tracing::warn!(error = %removal, "removing a failed run's container");
            }
            return Err(e);
        }
    };

    let lease = (prepared.egress.as_ref())
        .or(cold_egress.as_ref())
        .or(warm_egress.as_ref());
    if let Some(lost) = lease.and_then(crate::gateway::Lease::lost) {
        return Err(lost);
    }
    conclude(
        sandbox,
        prepared,
        &status,
        collected,
        (stdout, stderr),
        started,
    )
}

/// Passes on what the runner's ends still held back; returns the frame, if a
/// whole one arrived.
fn finish_ends(
    ends: Option<RunnerEnds>,
    stdout: &mut StreamBuffer,
    stderr: &mut StreamBuffer,
    handler: Option<&OutputHandler>,
) -> Option<Vec<u8>> {
    let (out, err, frame) = ends?.finish();
    stdout.push(&out, handler);
    stderr.push(&err, handler);
    frame
}
