//! [`SandboxPool`]: one sandbox's containers, started and waiting for a job.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::FutureExt;

use super::{agent_pools, PoolConfig, Pooled, Recipe};
use crate::client::Client;
use crate::error::Result;
use crate::sandbox::{RunOptions, RunOutput, Sandbox, Value, Warm, WarmContainer};
use crate::warm::{Discard, Fill, PoolStats};

/// What a warm container runs until it is handed a job: wait for a line on
/// stdin with the attempt number, then `exec` the program as a cold
/// container would run it (the command the uploaded inputs brought). A
/// closed stdin (the pool shutting down) ends it.
const SHELL_WAITER: &str = "read -r attempt || exit 0; \
    DOCKHAND_ATTEMPT=$attempt; export DOCKHAND_ATTEMPT; \
    . /var/inputs/.dockhand/cmd.sh";

/// The waiter of a sandbox whose jobs may travel inline (see
/// `inputs::inline_job`): the interpreter itself, started, with the runner
/// from its environment compiled and the modules it uses loaded before the
/// job comes, so a handover costs no interpreter start. The line carries the
/// attempt number and the inline job's JSON; a line with the number alone
/// means the inputs were uploaded, and their command is run as by
/// [`SHELL_WAITER`]. Stdin is then `/dev/null`, as in a cold container.
/// Nothing here is a boundary: the container is one job's, and the code
/// that runs next may read all of this.
const PYTHON_WAITER: &str = r#"import os, sys, json, atexit, gc
runner = compile(os.environ.pop('DOCKHAND_RUNNER'), '<dockhand-runner>', 'exec')
gc.freeze()
line = b''
while not line.endswith(b'\n'):
    chunk = os.read(0, 1 << 16)
    if not chunk:
        sys.exit(0)
    line += chunk
attempt, _, job = line[:-1].decode('utf-8').partition(' ')
os.environ['DOCKHAND_ATTEMPT'] = attempt
null = os.open('/dev/null', os.O_RDONLY)
os.dup2(null, 0)
os.close(null)
if not job:
    os.execv('/bin/sh', ['/bin/sh', '/var/inputs/.dockhand/cmd.sh'])
os.environ['DOCKHAND_JOB'] = job
del line, chunk, job
exec(runner, {'__name__': '__main__', '__builtins__': __builtins__})
"#;

/// Containers of one sandbox, created and started ahead of need. See the
/// [module documentation](super) for what a pool fixes in advance.
pub struct SandboxPool {
    client: Client,
    sandbox: Sandbox,
    pooled: Pooled<Warm>,
}

impl std::fmt::Debug for SandboxPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxPool")
            .field("sandbox", &self.sandbox.name())
            .field("stats", &self.stats())
            .finish()
    }
}

impl Client {
    /// A pool of started containers for `sandbox` (on a cluster, pods
    /// waiting for their inputs); it fills in the background. The image is
    /// resolved (built if need be) first, so a bad image fails here.
    pub async fn pool(&self, sandbox: &Sandbox, config: PoolConfig) -> Result<SandboxPool> {
        let image = self.resolve_image(sandbox.image()).await?;
        let config = if sandbox.runtime().secrets.is_empty() {
            config
        } else {
            tracing::warn!(
                sandbox = %sandbox.name(),
                "a sandbox with secrets is not pooled: its runs start cold"
            );
            PoolConfig::new(0)
        };
        // On agent-sandbox, the cluster keeps the pods warm and each run
        // claims one: nothing is held here. An allow-list is a policy of
        // each pod's own, so such a pool keeps pods of its own.
        let agent = agent_pools!(|cluster, size| {
            let reference = image.reference.clone();
            async move {
                if matches!(sandbox.runtime().network, crate::Network::Egress(_)) {
                    return Ok(None);
                }
                let pool =
                    crate::sandbox::on_cluster::agent_pool(cluster, sandbox, &reference, size)
                        .await?;
                Ok(Some(pool))
            }
        });
        let pooled = super::open(self, config, agent, |config| Recipe {
            name: format!("pool:{}", sandbox.name()),
            fill: fill(self, sandbox, image.reference.clone(), config.start_limit),
            stop: discard(),
        })
        .await?;
        Ok(SandboxPool {
            client: self.clone(),
            sandbox: sandbox.clone(),
            pooled,
        })
    }
}

/// Makes one warm container (a pod on a cluster) of `sandbox` from `image`,
/// within `limit`.
fn fill(client: &Client, sandbox: &Sandbox, image: String, limit: Duration) -> Fill<Warm> {
    let (client, sandbox) = (client.clone(), sandbox.clone());
    Arc::new(move || {
        let (client, sandbox, image) = (client.clone(), sandbox.clone(), image.clone());
        async move {
            // A pod's own wait names what held it up (see `warm_one`).
            if client.cluster().is_some() {
                return warm_one(&client, &sandbox, &image, limit).await;
            }
            match tokio::time::timeout(limit, warm_one(&client, &sandbox, &image, limit)).await {
                Ok(made) => made,
                Err(_) => Err(crate::Error::Docker {
                    operation: "start a warm container",
                    message: format!("it was not running within {limit:?}"),
                    status: None,
                }),
            }
        }
        .boxed()
    })
}

/// Removes a warm container (or pod) the pool no longer needs.
fn discard() -> Discard<Warm> {
    Arc::new(|warm: Warm| {
        async move {
            let removed = match warm {
                Warm::Container(warm) => warm.container.remove().await,
                Warm::Pod(pod) => pod.remove().await,
            };
            if let Err(e) = removed {
                tracing::warn!(error = %e, "removing a pooled container");
            }
        }
        .boxed()
    })
}

/// One container (a pod on a cluster) that waits for its job.
async fn warm_one(
    client: &Client,
    sandbox: &Sandbox,
    image: &str,
    limit: Duration,
) -> Result<Warm> {
    #[cfg(feature = "kubernetes")]
    if let Some(cluster) = client.cluster() {
        return Ok(Warm::Pod(Box::new(
            crate::sandbox::on_cluster::warm_pod(cluster, sandbox, image, limit).await?,
        )));
    }
    let _ = (image, limit);
    Ok(Warm::Container(Box::new(
        warm_container(client, sandbox).await?,
    )))
}

/// Creates, attaches and starts one container that waits for its job.
async fn warm_container(client: &Client, sandbox: &Sandbox) -> Result<WarmContainer> {
    let image = client.images()?.resolve(sandbox.image()).await?;
    let runner = crate::sandbox::inline_runner(sandbox);
    let cmd = match runner {
        Some(_) => ["python3", "-c", PYTHON_WAITER],
        None => ["/bin/sh", "-c", SHELL_WAITER],
    };
    let mut spec =
        crate::sandbox::container_spec(sandbox, &image.reference, cmd.map(String::from).to_vec());
    spec.open_stdin = true;
    if let Some(runner) = runner {
        spec.env
            .push(format!("{}={runner}", crate::sandbox::INLINE_RUNNER_ENV));
    }
    spec.extra_labels
        .insert("dev.dockhand.pool".into(), sandbox.name().to_string());
    // Under a policy: the container's own network and registration, made
    // with it, so that its run starts with its way out ready.
    let egress = match &sandbox.runtime().network {
        crate::Network::Egress(policy) => {
            let lease =
                crate::gateway::Lease::open(client.gateway_access()?, policy, Vec::new()).await?;
            lease.apply(&mut spec);
            Some(lease)
        }
        _ => None,
    };
    let engine = client.engine()?;
    let container = engine.create_container(&spec).await?;
    let id = container.id().to_string();
    let started = async {
        if let Some(lease) = &egress {
            lease.install(engine, &id).await?;
        }
        if sandbox.image().is_prebuilt() {
            let tar = crate::sandbox::writable_root()?;
            engine
                .upload_archive(&id, crate::sandbox::OUTPUTS_DIR, Bytes::from(tar))
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
            .run_inner(&self.sandbox, given, options, Some(&self.pooled))
            .await
    }

    /// The sandbox this pool runs.
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    super::pool_methods!("container");
}
