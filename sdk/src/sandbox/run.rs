//! Running a sandbox: fresh container per attempt, inputs in, outputs out,
//! always removed; plus the output cache and retries around it.

use std::time::Instant;

use bytes::Bytes;

use super::attempt::{Prepared, RunOptions, RunOutput};
use super::cache;
use super::inputs;
use super::spec::Sandbox;
use super::value::Value;
use crate::backend::{JobDelivery, Pooled, Warm};
use crate::client::Client;
use crate::error::Result;
use crate::settings::SecretMount;
use crate::settings::{CacheMode, Network};

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
        let backend = self.runs_on();
        backend.refuse_network(&rt.network, &rt.secrets)?;
        let offers = backend.offers();
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
        // Where the backend has no gateway, an allow-list is each pod's own
        // policy instead.
        let bound = rt.secrets.iter().any(|s| s.hosts().is_some());
        let (egress, secrets) = if offers.gateway && (pool.is_none() || bound) {
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
        // A frame needs stdout apart from stderr; an inline job, a backend
        // that takes one (a pod takes its job as an archive).
        let frame_marker = (offers.separate_streams)
            .then(|| inputs::frame_marker(sandbox))
            .flatten();
        let inline = (offers.inline_jobs)
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
}
