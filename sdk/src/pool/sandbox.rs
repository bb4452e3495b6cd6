//! [`SandboxPool`]: one sandbox's containers, started and waiting for a job.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;

use super::{PoolConfig, Pooled, Recipe};
use crate::backend::{Warm, WarmOneShot};
use crate::client::Client;
use crate::error::Result;
use crate::sandbox::{RunOptions, RunOutput, Sandbox, Value};
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
        // claims one: nothing is held here.
        let template = (sandbox, image.reference.as_str());
        let pooled = super::open(self, config, &template, |config| Recipe {
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

/// Makes one warm container (a pod on a cluster) of `sandbox` from `image`
/// (resolved when the pool opened), within `limit`.
fn fill(client: &Client, sandbox: &Sandbox, image: String, limit: Duration) -> Fill<Warm> {
    let (client, sandbox) = (client.clone(), sandbox.clone());
    Arc::new(move || {
        let (client, sandbox, image) = (client.clone(), sandbox.clone(), image.clone());
        async move {
            let runner = crate::sandbox::inline_runner(&sandbox);
            let waiter = match runner {
                Some(_) => ["python3", "-c", PYTHON_WAITER],
                None => ["/bin/sh", "-c", SHELL_WAITER],
            };
            let plan = WarmOneShot {
                shape: crate::sandbox::one_shot_shape(&sandbox, &image, Vec::new()),
                waiter: waiter.map(String::from).to_vec(),
                waiter_env: runner
                    .map(|runner| format!("{}={runner}", crate::sandbox::INLINE_RUNNER_ENV))
                    .into_iter()
                    .collect(),
                gateway: client.gateway_access().ok(),
                limit,
            };
            client.runs_on().warm_one_shot(&plan).await
        }
        .boxed()
    })
}

/// Removes a warm container (or pod) the pool no longer needs.
fn discard() -> Discard<Warm> {
    Arc::new(|warm: Warm| {
        async move {
            if let Err(e) = warm.remove().await {
                tracing::warn!(error = %e, "removing a pooled container");
            }
        }
        .boxed()
    })
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
