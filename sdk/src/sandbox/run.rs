//! Running a sandbox once: fresh container, inputs in, outputs out, removed.

use std::time::{Duration, Instant};

use futures::StreamExt;

use super::capture::{tail, CapturedText, OutputHandler, StreamBuffer, StreamKind};
use super::outputs::{self, Outputs};
use super::preamble::OUTPUTS_DIR;
use super::spec::{Program, Sandbox};
use super::value::Value;
use super::{inputs, traceback};
use crate::client::Client;
use crate::engine::{ContainerSpec, LogChunk};
use crate::error::{Error, PythonError, Result};

/// How much of stderr an [`Error::NonZeroExit`] carries.
const STDERR_TAIL_BYTES: usize = 4096;

/// Per-call options of [`Client::run_with`].
#[derive(Clone, Default)]
pub struct RunOptions {
    pub(crate) on_output: Option<OutputHandler>,
}

impl std::fmt::Debug for RunOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunOptions")
            .field("on_output", &self.on_output.is_some())
            .finish()
    }
}

impl RunOptions {
    /// Default options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Receives each stdout/stderr line while the run goes.
    pub fn on_output(
        mut self,
        handler: impl Fn(super::OutputLine) + Send + Sync + 'static,
    ) -> Self {
        self.on_output = Some(std::sync::Arc::new(handler));
        self
    }
}

/// The result of a successful run.
#[derive(Debug)]
pub struct RunOutput {
    /// Typed outputs.
    pub outputs: Outputs,
    /// Exit code (0).
    pub exit_code: i64,
    /// Captured standard output.
    pub stdout: CapturedText,
    /// Captured standard error.
    pub stderr: CapturedText,
    /// Wall time from container creation to removal.
    pub duration: Duration,
    /// The image reference the run used.
    pub image: String,
}

impl RunOutput {
    /// Shorthand for `self.outputs.get(name)`.
    pub fn get<T: super::value::FromValue>(&self, name: &str) -> Result<T> {
        self.outputs.get(name)
    }
}

impl Client {
    /// Runs `sandbox` once with `inputs` in a fresh container, which is removed
    /// afterwards whatever happens.
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
        let given: Vec<(String, Value)> = inputs
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        // Everything about the inputs is checked before any container exists.
        let inputs = inputs::validate(sandbox, given)?;
        let upload = inputs::archive(sandbox, &inputs)?;
        let cmd = inputs::command_line(sandbox, &inputs);
        let upload = bytes::Bytes::from(upload);
        let image = self.images().resolve(&sandbox.image).await?;
        let first = self
            .run_once(
                sandbox,
                &image.reference,
                cmd.clone(),
                upload.clone(),
                &options,
            )
            .await;
        match first {
            // The image was removed since this process resolved it: make it again.
            Err(Error::Docker {
                operation: "create container",
                message,
            }) if message.contains("No such image") => {
                self.images().forget(&sandbox.image);
                let image = self.images().resolve(&sandbox.image).await?;
                self.run_once(sandbox, &image.reference, cmd, upload, &options)
                    .await
            }
            other => other,
        }
    }

    async fn run_once(
        &self,
        sandbox: &Sandbox,
        image: &str,
        cmd: Vec<String>,
        upload: bytes::Bytes,
        options: &RunOptions,
    ) -> Result<RunOutput> {
        let started = Instant::now();
        let engine = self.engine();
        let spec = ContainerSpec {
            image: image.to_string(),
            cmd,
            entrypoint: Some(Vec::new()),
            env: vec!["HOME=/tmp".into(), "PYTHONUNBUFFERED=1".into()],
            working_dir: Some("/tmp".into()),
            kind: "sandbox",
            extra_labels: [("dev.dockhand.sandbox".to_string(), sandbox.name.clone())].into(),
            ..Default::default()
        };
        let container = engine.create_container(&spec).await?;
        let id = container.id().to_string();
        engine.upload_archive(&id, "/var", upload).await?;
        engine.start_container(&id).await?;

        let handler = options.on_output.as_ref();
        let mut stdout = StreamBuffer::new(StreamKind::Stdout, sandbox.output_limit);
        let mut stderr = StreamBuffer::new(StreamKind::Stderr, sandbox.output_limit);
        let logs = async {
            let mut stream = std::pin::pin!(engine.follow_logs(&id));
            while let Some(chunk) = stream.next().await {
                match chunk? {
                    LogChunk::Stdout(b) => stdout.push(&b, handler),
                    LogChunk::Stderr(b) => stderr.push(&b, handler),
                }
            }
            Ok::<_, Error>(())
        };
        let (status, logs) = tokio::join!(engine.wait_container(&id), logs);
        let status = status?;
        logs?;
        let stdout = stdout.finish(handler);
        let stderr = stderr.finish(handler);

        let archive = engine
            .download_archive(&id, OUTPUTS_DIR)
            .await?
            .unwrap_or_default();
        container.remove().await?;
        let duration = started.elapsed();

        let collected = outputs::collect(&archive, &sandbox.outputs)?;
        if status.oom_killed {
            return Err(Error::OutOfMemory { limit_bytes: 0 });
        }
        if let Some(report) = &collected.status {
            if let Some(name) = report.unassigned.as_ref().and_then(|u| u.first()) {
                return Err(Error::OutputNotAssigned { name: name.clone() });
            }
            if let Some(bad) = &report.bad_output {
                return Err(Error::BadOutput {
                    name: bad.name.clone(),
                    expected: bad.expected.clone(),
                    got: bad.got.clone(),
                });
            }
        }
        if status.code != 0 {
            let python = match (&collected.status, &sandbox.program) {
                (Some(s), _) if s.error.is_some() => s.error.as_ref().map(|e| PythonError {
                    exception_type: e.kind.clone(),
                    message: e.message.clone(),
                    traceback: e.traceback.clone(),
                }),
                (_, Program::Code { .. }) => traceback::parse(&stderr.text),
                _ => None,
            };
            return Err(Error::NonZeroExit {
                exit_code: status.code,
                stderr_tail: tail(&stderr.text, STDERR_TAIL_BYTES),
                python,
            });
        }
        let outputs = outputs::parse(collected, &sandbox.outputs)?;
        Ok(RunOutput {
            outputs,
            exit_code: status.code,
            stdout,
            stderr,
            duration,
            image: image.to_string(),
        })
    }
}
