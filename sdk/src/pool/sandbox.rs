//! [`SandboxPool`]: one sandbox's containers, started and waiting for a job.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;

use super::warm::{Discard, Fill, PoolStats, WarmPool};
use super::PoolConfig;
use crate::client::Client;
use crate::engine::ContainerGuard;
use crate::error::Result;
use crate::sandbox::{RunOptions, RunOutput, Sandbox, Value};

/// What a warm container runs until it is handed a job: wait for a line on
/// stdin, the attempt number and, for an inline job (see
/// `inputs::inline_job`), the job's JSON; then `exec` the program as a cold
/// container would run it: the inline runner kept in the environment, or the
/// command the uploaded inputs brought. A closed stdin (the pool shutting
/// down) ends it.
const WAITER: &str = "read -r attempt job || exit 0; \
    DOCKHAND_ATTEMPT=$attempt; export DOCKHAND_ATTEMPT; \
    if [ -n \"$job\" ]; then \
        DOCKHAND_JOB=$job; export DOCKHAND_JOB; \
        exec python3 -c \"$DOCKHAND_RUNNER\" </dev/null; \
    fi; \
    . /var/inputs/.dockhand/cmd.sh";

/// How long making one warm container may take before it counts as failed.
const FILL_LIMIT: Duration = Duration::from_secs(60);

/// Containers of one sandbox, created and started ahead of need. See the
/// [module documentation](super) for what a pool fixes in advance.
pub struct SandboxPool {
    client: Client,
    sandbox: Sandbox,
    warm: WarmPool<ContainerGuard>,
}

impl std::fmt::Debug for SandboxPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxPool")
            .field("sandbox", &self.sandbox.name())
            .field("stats", &self.warm.stats())
            .finish()
    }
}

impl Client {
    /// A pool of started containers for `sandbox`; it fills in the
    /// background. The image is resolved (built if need be) first, so a bad
    /// image fails here.
    pub async fn pool(&self, sandbox: &Sandbox, config: PoolConfig) -> Result<SandboxPool> {
        self.images().resolve(sandbox.image()).await?;
        let size = if sandbox.runtime().secrets.is_empty() {
            config.size
        } else {
            tracing::warn!(
                sandbox = %sandbox.name(),
                "a sandbox with secrets is not pooled: its runs start cold"
            );
            0
        };
        let fill: Fill<ContainerGuard> = {
            let (client, sandbox) = (self.clone(), sandbox.clone());
            Arc::new(move || {
                let (client, sandbox) = (client.clone(), sandbox.clone());
                async move {
                    match tokio::time::timeout(FILL_LIMIT, warm_container(&client, &sandbox)).await
                    {
                        Ok(made) => made,
                        Err(_) => Err(crate::Error::Docker {
                            operation: "start a warm container",
                            message: format!("no container within {FILL_LIMIT:?}"),
                            status: None,
                        }),
                    }
                }
                .boxed()
            })
        };
        let discard: Discard<ContainerGuard> = Arc::new(|container: ContainerGuard| {
            async move {
                if let Err(e) = container.remove().await {
                    tracing::warn!(error = %e, "removing a pooled container");
                }
            }
            .boxed()
        });
        let name = format!("pool:{}", sandbox.name());
        let warm = WarmPool::new(name, size, fill, discard, self.reporter().clone());
        Ok(SandboxPool {
            client: self.clone(),
            sandbox: sandbox.clone(),
            warm,
        })
    }
}

/// Creates and starts one container that waits for its job.
async fn warm_container(client: &Client, sandbox: &Sandbox) -> Result<ContainerGuard> {
    let image = client.images().resolve(sandbox.image()).await?;
    let cmd = ["/bin/sh", "-c", WAITER].map(String::from).to_vec();
    let mut spec = crate::sandbox::container_spec(sandbox, &image.reference, cmd);
    spec.open_stdin = true;
    if let Some(runner) = crate::sandbox::inline_runner(sandbox) {
        spec.env
            .push(format!("{}={runner}", crate::sandbox::INLINE_RUNNER_ENV));
    }
    spec.extra_labels
        .insert("dev.dockhand.pool".into(), sandbox.name().to_string());
    let engine = client.engine();
    let container = engine.create_container(&spec).await?;
    let id = container.id().to_string();
    let started = async {
        if sandbox.image().is_prebuilt() {
            let tar = crate::sandbox::writable_root()?;
            engine
                .upload_archive(&id, crate::sandbox::OUTPUTS_DIR, Bytes::from(tar))
                .await?;
        }
        engine.start_container(&id).await
    };
    match started.await {
        Ok(()) => Ok(container),
        Err(e) => {
            let _ = container.remove().await;
            Err(e)
        }
    }
}

impl SandboxPool {
    /// Runs the sandbox once, in a warm container if one is ready (else a
    /// cold one); the same as [`Client::run`] otherwise, output cache and
    /// retries included.
    pub async fn run<I, K, V>(&self, inputs: I) -> Result<RunOutput>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<Value>,
    {
        self.run_with(inputs, RunOptions::default()).await
    }

    /// [`SandboxPool::run`] with options (live output, ...).
    pub async fn run_with<I, K, V>(&self, inputs: I, options: RunOptions) -> Result<RunOutput>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<Value>,
    {
        let given = crate::sandbox::named_inputs(inputs);
        self.client
            .run_inner(&self.sandbox, given, options, Some(&self.warm))
            .await
    }

    /// The sandbox this pool runs.
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    super::pool_methods!("container");
}
