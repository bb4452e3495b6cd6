//! Running a sandbox: fresh container per attempt, inputs in, outputs out,
//! always removed; plus the output cache and retries around it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;

use super::attempt::{JobDelivery, Prepared, RunOptions, RunOutput, Warm, WarmContainer};
use super::cache;
use super::capture::{OutputHandler, StreamBuffer, StreamKind};
use super::conclusion::{collect_streamed, conclude, within};
use super::frame::RunnerEnds;
use super::inputs;
use super::launch::{cold_spec, hand_over};
use super::outputs;
use super::preamble::{INPUTS_DIR, OUTPUTS_DIR};
use super::spec::Sandbox;
use super::value::Value;
use crate::backend::Pooled;
use crate::client::Client;
use crate::engine::{ExitStatus, LogChunk};
use crate::error::{Error, Result};
use crate::settings::{CacheMode, Network};
use crate::settings::{SecretMount, SECRETS_DIR};

impl Client {
    /// Runs `sandbox` once with `inputs`, in a fresh container that is removed
    /// afterwards whatever happens (error, timeout, cancellation, panic).
    ///
    /// ```no_run
    /// # async fn demo() -> dockhand::Result<()> {
    /// use dockhand::{Client, Sandbox, Type};
    /// let client = Client::connect().await?;
    /// let double = Sandbox::code("double", "result = x * 2")
    ///     .input("x", Type::Int)
    ///     .output("result", Type::Int)
    ///     .build()?;
    /// let out = client.run(&double, [("x", 21)]).await?;
    /// assert_eq!(out.get::<i64>("result")?, 42);
    /// # Ok(()) }
    /// ```
    pub async fn run<I, K, V>(&self, sandbox: &Sandbox, inputs: I) -> Result<RunOutput>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<Value>,
    {
        self.run_with(sandbox, inputs, RunOptions::default()).await
    }

    /// [`Client::run`] with options (live output, ...).
    pub async fn run_with<I, K, V>(
        &self,
        sandbox: &Sandbox,
        inputs: I,
        options: RunOptions,
    ) -> Result<RunOutput>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<Value>,
    {
        self.run_inner(sandbox, inputs::named(inputs), options, None)
            .await
    }

    /// A run, through `pool`'s warm containers when it has one ready.
    pub(crate) async fn run_inner(
        &self,
        sandbox: &Sandbox,
        given: Vec<(String, Value)>,
        options: RunOptions,
        pool: Option<&Pooled<Warm>>,
    ) -> Result<RunOutput> {
        let started = Instant::now();
        // Everything about the inputs is checked before any container exists.
        let inputs = inputs::validate(sandbox, given)?;
        let rt = &sandbox.runtime;
        let secrets: Vec<(String, String)> = rt
            .secrets
            .iter()
            .map(|s| Ok((s.name.clone(), s.resolve()?)))
            .collect::<Result<_>>()?;
        #[cfg(feature = "kubernetes")]
        let on_cluster = self.cluster().is_some();
        #[cfg(not(feature = "kubernetes"))]
        let on_cluster = false;
        #[cfg(feature = "kubernetes")]
        if on_cluster {
            super::on_cluster::check(sandbox)?;
        }
        let image = self.resolve_image(&sandbox.image).await?;

        // A run that may fetch data is not replayed unless asked: what it
        // fetched may have changed.
        let cacheable = rt.cache != CacheMode::Disable
            && (secrets.is_empty() || rt.cache_with_secrets)
            && (rt.network == Network::None || rt.cache_with_network);
        let store = std::sync::Arc::new(self.output_cache().store());
        // Hashing File and Dir inputs and copying cached files read the
        // disk: off the async threads.
        let key = if cacheable {
            let (sandbox, image_id, inputs) = (sandbox.clone(), image.id.clone(), inputs.clone());
            Some(
                crate::util::blocking("hashing the inputs for the output cache", move || {
                    cache::key(&sandbox, &image_id, &inputs)
                })
                .await?,
            )
        } else {
            None
        };
        if let (Some(key), CacheMode::Auto) = (&key, rt.cache) {
            let (lookup, wanted) = (store.clone(), key.clone());
            let found =
                crate::util::blocking("reading the output cache", move || lookup.get(&wanted))
                    .await?;
            if let Some(hit) = found {
                tracing::debug!(sandbox = %sandbox.name, key = %key, "output cache hit");
                return Ok(hit.into_output(started.elapsed()));
            }
        }

        // A policy's network and the gateway's registration, shared by the
        // attempts; secrets bound to hosts become placeholders from here on.
        let redactions = secrets.clone();
        // A pooled run takes its warm container's way out, or opens one if it
        // starts cold; secrets bound to hosts need theirs now (such sandboxes
        // are not pooled).
        // On a cluster, an allow-list is each pod's own policy instead.
        let bound = rt.secrets.iter().any(|s| s.hosts().is_some());
        let on_docker = self.backend() == "docker";
        let (egress, secrets) = if on_docker && (pool.is_none() || bound) {
            crate::gateway::open_for(self.gateway_access()?, &rt.network, &rt.secrets, secrets)
                .await?
        } else {
            (None, secrets)
        };
        // Only a miss needs the archives (reading File and Dir inputs again).
        let file_secrets: Vec<(String, String)> = rt
            .secrets
            .iter()
            .zip(&secrets)
            .filter(|(s, _)| s.mount == SecretMount::File)
            .map(|(_, pair)| pair.clone())
            .collect();
        let secrets_tar = if file_secrets.is_empty() {
            None
        } else {
            let owner = rt.hardening.owner_ids();
            Some(Bytes::from(inputs::secrets_archive(&file_secrets, owner)?))
        };
        // A cluster's pod takes its job as an archive, and its log mixes
        // stdout with stderr, so no frame is read from it.
        let frame_marker = (!on_cluster)
            .then(|| inputs::frame_marker(sandbox))
            .flatten();
        let inline = (!on_cluster)
            .then(|| inputs::inline_job(sandbox, &inputs, frame_marker.as_deref()))
            .flatten();
        let job = match inline {
            Some((command, job)) => JobDelivery::Inline { command, job },
            None => {
                let command = inputs::command_line(sandbox, &inputs);
                // File and Dir inputs are read from disk: off the async threads.
                let (sandbox, cmd, marker) =
                    (sandbox.clone(), command.clone(), frame_marker.clone());
                let tar = crate::util::blocking("building the inputs archive", move || {
                    inputs::archive(&sandbox, &inputs, &cmd, marker.as_deref())
                })
                .await?;
                JobDelivery::Upload { command, tar }
            }
        };
        let mut prepared = Prepared {
            needs_outputs_dir: sandbox.image.is_prebuilt(),
            image,
            job,
            frame_marker,
            secrets,
            secrets_tar,
            redactions,
            egress,
        };
        let outcome = self
            .attempts(sandbox, &mut prepared, &options, pool, key, store, started)
            .await;
        if let Some(lease) = prepared.egress.take() {
            lease.close().await;
        }
        outcome
    }

    /// One attempt in one fresh container: a warm one from `pool` if one is
    /// ready, else one made now.
    pub(super) async fn attempt(
        &self,
        sandbox: &Sandbox,
        prepared: &Prepared,
        number: u32,
        options: &RunOptions,
        pool: Option<&Pooled<Warm>>,
    ) -> Result<RunOutput> {
        #[cfg(feature = "kubernetes")]
        if let Some(cluster) = self.cluster() {
            // Boxed: inline, the cluster's attempt would make every run's
            // future (the Docker one's too) as large as it is.
            return Box::pin(super::on_cluster::attempt(
                cluster, sandbox, prepared, number, options, pool,
            ))
            .await;
        }
        let started = Instant::now();
        let engine = self.engine()?;
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
            Some(pool) => {
                let wait = deadline.map_or(crate::warm::WAIT_LIMIT, |(at, _)| {
                    at.saturating_duration_since(tokio::time::Instant::now())
                        .min(crate::warm::WAIT_LIMIT)
                });
                pool.warm.take_or_wait(wait).await
            }
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
            #[cfg(feature = "kubernetes")]
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
                            crate::gateway::Lease::open(self.gateway_access()?, policy, Vec::new());
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
