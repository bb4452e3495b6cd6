//! The operations an agent uses on a session, as a trait: the real
//! [`Session`](super::Session) and the in-memory
//! [`FakeSession`](crate::testing::FakeSession) both implement it.

use std::future::Future;
use std::time::Duration;

use super::edits::{apply_edits, Edit, EditResult};
use super::protocol::DirEntry;
use crate::error::Result;

/// Options of one command.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExecOptions {
    /// Kill the command after this long (the session survives); `None` uses
    /// the session's default.
    pub timeout: Option<Duration>,
    /// Bytes fed to standard input.
    pub stdin: Option<Vec<u8>>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Working directory (relative to the workspace, or absolute).
    pub cwd: Option<String>,
}

impl ExecOptions {
    /// Default options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Sets standard input.
    pub fn stdin(mut self, bytes: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(bytes.into());
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Sets the working directory.
    pub fn cwd(mut self, dir: impl Into<String>) -> Self {
        self.cwd = Some(dir.into());
        self
    }
}

/// What a command did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ExecResult {
    /// Exit code.
    pub exit_code: i64,
    /// Standard output (capped; invalid UTF-8 replaced).
    pub stdout: String,
    /// Standard error (capped).
    pub stderr: String,
    /// Whether stdout was cut.
    pub stdout_truncated: bool,
    /// Whether stderr was cut.
    pub stderr_truncated: bool,
    /// Wall time.
    pub duration: Duration,
}

impl ExecResult {
    /// A result with this exit code and output (for fakes such as
    /// [`FakeSession`](crate::testing::FakeSession)).
    pub fn new(exit_code: i64, stdout: impl Into<String>, stderr: impl Into<String>) -> Self {
        ExecResult {
            exit_code,
            stdout: stdout.into(),
            stderr: stderr.into(),
            ..Default::default()
        }
    }

    /// Whether the command exited with 0.
    pub fn success(&self) -> bool {
        self.exit_code == 0
    }
}

/// The operations of a session. Paths are relative to the workspace (or
/// absolute under it, a mount or `/tmp`).
pub trait SessionApi: Send + Sync {
    /// Runs a shell command with options.
    fn exec_with(
        &self,
        command: &str,
        options: ExecOptions,
    ) -> impl Future<Output = Result<ExecResult>> + Send;

    /// Reads a file (binary-safe).
    fn read_file(&self, path: &str) -> impl Future<Output = Result<Vec<u8>>> + Send;

    /// Writes a file atomically, creating parent directories.
    fn write_file(&self, path: &str, data: &[u8]) -> impl Future<Output = Result<()>> + Send;

    /// Lists a directory.
    fn list_dir(&self, path: &str) -> impl Future<Output = Result<Vec<DirEntry>>> + Send;

    /// Removes a file or a directory tree.
    fn remove(&self, path: &str) -> impl Future<Output = Result<()>> + Send;

    /// Runs a shell command in the workspace.
    fn exec(&self, command: &str) -> impl Future<Output = Result<ExecResult>> + Send {
        self.exec_with(command, ExecOptions::default())
    }

    /// Reads a text file (invalid UTF-8 replaced).
    fn read_to_string(&self, path: &str) -> impl Future<Output = Result<String>> + Send {
        async move { Ok(String::from_utf8_lossy(&self.read_file(path).await?).into_owned()) }
    }

    /// Applies whitespace-tolerant edits to a file: all or none (see
    /// [`apply_edits`]); the file is written atomically.
    fn edit_file(
        &self,
        path: &str,
        edits: &[Edit],
    ) -> impl Future<Output = Result<EditResult>> + Send {
        async move {
            let source = self.read_to_string(path).await?;
            let result = apply_edits(&source, edits)?;
            self.write_file(path, result.content.as_bytes()).await?;
            Ok(result)
        }
    }
}
