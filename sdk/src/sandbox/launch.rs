//! One attempt of a run on whichever backend the client has: the backend
//! launches it (a pool's item handed the job, or a container or pod made
//! for it); here its output is read as it comes, redacted and cut, its end
//! awaited within the run's time limit, its outputs read back, and the
//! container or pod removed whatever happens.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;

use super::attempt::{Prepared, RunOptions, RunOutput};
use super::capture::{OutputHandler, StreamBuffer, StreamKind};
use super::conclusion::{collect_streamed, conclude};
use super::frame::RunnerEnds;
use super::outputs;
use super::preamble::{INPUTS_DIR, OUTPUTS_DIR};
use super::spec::Sandbox;
use crate::backend::{OneShot, OneShotShape, Pooled, Warm};
use crate::client::Client;
use crate::engine::{ContainerSpec, ExitStatus, LogChunk};
use crate::error::{Error, Result};
use crate::settings::confine;

/// What every container of `sandbox` is, whichever attempt or pool item.
pub(crate) fn shape<'a>(sandbox: &'a Sandbox, image: &str, cmd: Vec<String>) -> OneShotShape<'a> {
    let rt = &sandbox.runtime;
    OneShotShape {
        name: &sandbox.name,
        spec: container_spec(sandbox, image, cmd),
        secrets: &rt.secrets,
        network: &rt.network,
        timeout: rt.timeout,
        needs_outputs_dir: sandbox.image.is_prebuilt(),
    }
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

/// One attempt in one fresh container or pod: a warm one from `pool` if
/// one is ready, else one made now.
pub(super) async fn attempt(
    client: &Client,
    sandbox: &Sandbox,
    prepared: &Prepared,
    number: u32,
    options: &RunOptions,
    pool: Option<&Pooled<Warm>>,
) -> Result<RunOutput> {
    let started = Instant::now();
    let rt = &sandbox.runtime;
    let backend = client.runs_on();
    let plan = OneShot {
        shape: shape(
            sandbox,
            &prepared.image.reference,
            prepared.job.command().to_vec(),
        ),
        job: &prepared.job,
        number,
        values: &prepared.secrets,
        secrets_tar: prepared.secrets_tar.as_ref(),
        egress: prepared.egress.as_ref(),
        gateway: client.gateway_access().ok(),
        pool,
    };
    let launched = backend.launch_one_shot(&plan).await?;
    let crate::backend::Launched {
        held,
        output,
        exit,
        output_ends,
        deadline,
        egress: launch_egress,
        _stdin,
    } = launched;
    let id = held.id().to_string();
    // Read again after its end to drain it: fused, it stays ended.
    let mut output = output.fuse();
    // Every way out below ends here, so the container is removed on the
    // async path (a blocking drop could stall the connections the daemon
    // still needs to finish with it); the guard's drop is for cancellation.
    let ran = async {
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
            let mut wait = exit;
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
            // Docker's attach stream may stay open after the exit (bollard
            // #251): take what is still buffered, then stop. A pod's log
            // ends with its program: read it to the end.
            if output_ends {
                while let Some(chunk) = output.next().await {
                    take(chunk)?;
                }
            } else {
                while let Ok(Some(chunk)) =
                    tokio::time::timeout(Duration::from_millis(200), output.next()).await
                {
                    take(chunk)?;
                }
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
            return Err(Error::ContainerGone { id: id.clone() });
        }
        // A whole frame from a clean exit stands for the download.
        let framed = frame
            .filter(|_| status.code == 0 && !status.oom_killed)
            .and_then(|f| outputs::from_frame(&f, &sandbox.outputs, rt.outputs_limit));
        if let Some(collected) = framed {
            tracing::debug!(container = %id, "outputs taken from the runner's frame, none downloaded");
            return Ok::<_, Error>((status, stdout, stderr, collected));
        }
        let collected = match backend.one_shot_outputs(&held).await? {
            Some(stream) => {
                collect_streamed(stream, &sandbox.outputs, rt.outputs_limit).await?
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
            held.remove_in_background();
            ran
        }
        Err(e @ Error::Timeout { .. }) => {
            // Answer at the limit; the container goes in the background.
            held.remove_in_background();
            return Err(e);
        }
        Err(e) => {
            if let Err(removal) = held.remove().await {
                tracing::warn!(error = %removal, "removing a failed run's container");
            }
            return Err(e);
        }
    };

    let lease = prepared.egress.as_ref().or(launch_egress.as_ref());
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
