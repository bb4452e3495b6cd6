//! Running extra processes in a running container (`docker exec`).
//!
//! For long-lived containers (code hosts, sessions); one-shot sandboxes need none.
#![allow(dead_code)]

use bollard::container::LogOutput;
use bollard::exec::{CreateExecOptions, StartExecResults};
use futures::{Stream, StreamExt};
use tokio::io::AsyncWriteExt;

use super::{docker_err, Engine, LogChunk};
use crate::error::{Error, Result};

/// One process to run inside a running container.
#[derive(Debug, Clone, Default)]
pub struct ExecSpec {
    /// Program and arguments.
    pub cmd: Vec<String>,
    /// Extra `KEY=value` pairs.
    pub env: Vec<String>,
    /// Working directory.
    pub working_dir: Option<String>,
    /// User to run as.
    pub user: Option<String>,
    /// Bytes fed to standard input, which is then closed.
    pub stdin: Option<Vec<u8>>,
}

/// What a finished exec produced.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOutput {
    /// Exit code.
    pub exit_code: i64,
    /// Standard output.
    pub stdout: Vec<u8>,
    /// Standard error.
    pub stderr: Vec<u8>,
}

/// A started exec: its output as it comes, then its exit code via [`Engine::exec_exit_code`].
pub struct ExecStream {
    /// The exec's id.
    pub exec_id: String,
    /// Output chunks in the order the daemon sent them.
    pub output: std::pin::Pin<Box<dyn Stream<Item = Result<LogChunk>> + Send>>,
}

impl Engine {
    /// Starts a process in a running container and streams its output.
    pub async fn exec_start(&self, container: &str, spec: &ExecSpec) -> Result<ExecStream> {
        let options = CreateExecOptions {
            cmd: Some(spec.cmd.clone()),
            env: (!spec.env.is_empty()).then(|| spec.env.clone()),
            working_dir: spec.working_dir.clone(),
            user: spec.user.clone(),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            attach_stdin: Some(spec.stdin.is_some()),
            tty: Some(false),
            ..Default::default()
        };
        let created = self
            .docker
            .create_exec(container, options)
            .await
            .map_err(|e| docker_err("create exec", e))?;
        let started = self
            .docker
            .start_exec(&created.id, None)
            .await
            .map_err(|e| docker_err("start exec", e))?;
        let StartExecResults::Attached { output, mut input } = started else {
            return Err(Error::Docker {
                operation: "start exec",
                message: "the daemon did not attach to the process".into(),
            });
        };
        if let Some(bytes) = &spec.stdin {
            // Exec closes the process's stdin when the attach input ends.
            input
                .write_all(bytes)
                .await
                .map_err(|e| Error::io("writing exec stdin", e))?;
            input
                .shutdown()
                .await
                .map_err(|e| Error::io("closing exec stdin", e))?;
        }
        drop(input);
        let output = output.filter_map(|item| async move {
            match item {
                Ok(LogOutput::StdOut { message } | LogOutput::Console { message }) => {
                    Some(Ok(LogChunk::Stdout(message)))
                }
                Ok(LogOutput::StdErr { message }) => Some(Ok(LogChunk::Stderr(message))),
                Ok(LogOutput::StdIn { .. }) => None,
                Err(e) => Some(Err(docker_err("read exec output", e))),
            }
        });
        Ok(ExecStream {
            exec_id: created.id,
            output: Box::pin(output),
        })
    }

    /// The exit code of a finished exec.
    pub async fn exec_exit_code(&self, exec_id: &str) -> Result<i64> {
        let inspect = self
            .docker
            .inspect_exec(exec_id)
            .await
            .map_err(|e| docker_err("inspect exec", e))?;
        Ok(inspect.exit_code.unwrap_or(-1))
    }

    /// Runs a process to completion and collects its output.
    pub async fn exec(&self, container: &str, spec: &ExecSpec) -> Result<ExecOutput> {
        let mut started = self.exec_start(container, spec).await?;
        let mut out = ExecOutput::default();
        while let Some(chunk) = started.output.next().await {
            match chunk? {
                LogChunk::Stdout(b) => out.stdout.extend_from_slice(&b),
                LogChunk::Stderr(b) => out.stderr.extend_from_slice(&b),
            }
        }
        out.exit_code = self.exec_exit_code(&started.exec_id).await?;
        Ok(out)
    }
}
