//! Commands that outlive the call that started them: each is fed, signalled
//! and watched through its [`ProcessControl`] by whoever holds it, while
//! other requests go on (what an E2B-style process service needs).

use futures::stream::BoxStream;

use crate::session::protocol::TerminalSize;

use super::*;

/// How to start a [`Session::spawn`]ed command.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct SpawnOptions {
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Working directory (relative to the workspace, or absolute under it,
    /// a mount or `/tmp`).
    pub cwd: Option<String>,
    /// Keep standard input open for [`ProcessControl::send_stdin`];
    /// otherwise it reads from `/dev/null`.
    pub stdin: bool,
    /// Kill the command's process group after this long.
    pub timeout: Option<Duration>,
    /// Run it on a terminal of this size: its input and output go through
    /// the terminal, and all output arrives as [`ExecEvent::Stdout`].
    pub pty: Option<TerminalSize>,
}

impl SpawnOptions {
    /// Default options: no stdin, no time limit.
    pub fn new() -> Self {
        Self::default()
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

    /// Keeps standard input open.
    pub fn stdin(mut self, open: bool) -> Self {
        self.stdin = open;
        self
    }

    /// Sets the time limit.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Runs the command on a terminal of `rows` by `cols`.
    pub fn pty(mut self, rows: u16, cols: u16) -> Self {
        self.pty = Some(TerminalSize { rows, cols });
        self
    }
}

/// A command started by [`Session::spawn`].
pub struct Spawned {
    /// Its pid in the container (also its process group).
    pub pid: u32,
    /// Feeds and signals it.
    pub control: ProcessControl,
    /// Its output as it comes, then its exit (or the error that ended the
    /// watch). The command runs on whether or not this is read; output that
    /// is not read waits on the host, so read it.
    pub events: BoxStream<'static, Result<ExecEvent>>,
}

impl std::fmt::Debug for Spawned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spawned").field("pid", &self.pid).finish()
    }
}

/// Feeds and signals a spawned command. Cheap to clone. Once the command
/// ended, its methods do nothing: a signal never reaches a reused pid.
#[derive(Clone, Debug)]
pub struct ProcessControl {
    session: Session,
    id: u64,
}

impl ProcessControl {
    /// Writes bytes to its standard input (started with `stdin`).
    pub async fn send_stdin(&self, data: &[u8]) -> Result<()> {
        self.session.send_input(self.id, data, false).await
    }

    /// Closes its standard input.
    pub async fn close_stdin(&self) -> Result<()> {
        self.session.send_input(self.id, &[], true).await
    }

    /// Resizes its terminal (started with [`SpawnOptions::pty`]; otherwise
    /// nothing happens).
    pub async fn resize(&self, rows: u16, cols: u16) -> Result<()> {
        self.session
            .write_line(&protocol::encode(&Request::Resize {
                id: self.id,
                rows,
                cols,
            }))
            .await
    }

    /// Sends `SIGKILL` (9), `SIGTERM` (15), `SIGINT` (2) or `SIGHUP` (1) to
    /// its process group; other numbers are refused.
    pub async fn signal(&self, signal: i32) -> Result<()> {
        if ![1, 2, 9, 15].contains(&signal) {
            return Err(Error::InvalidSpec {
                what: "signal",
                message: format!(
                    "{signal} is not one a command may be sent (SIGHUP, SIGINT, SIGKILL, SIGTERM)"
                ),
            });
        }
        self.session
            .write_line(&protocol::encode(&Request::Signal {
                id: self.id,
                signal,
            }))
            .await
    }
}

/// What [`Session::pty`] runs: the image's bash where it has one, else its
/// `sh` (busybox's, say).
const INTERACTIVE_SHELL: &str = "if command -v bash >/dev/null 2>&1; then exec bash; fi; exec sh";

/// The terminal type a shell is told it runs on unless the caller says.
const DEFAULT_TERM: &str = "xterm-256color";

impl Session {
    /// An interactive shell on a terminal of `rows` by `cols`: write to it
    /// with [`ProcessControl::send_stdin`], read what it shows from
    /// `events` (all of it as [`ExecEvent::Stdout`], then its exit), and
    /// follow the user's window with [`ProcessControl::resize`]. `Ctrl-C`
    /// (`\x03`) reaches the command in the foreground, as on any terminal.
    ///
    /// ```no_run
    /// # async fn demo(s: &dockhand::session::Session) -> dockhand::Result<()> {
    /// use dockhand::session::ExecEvent;
    /// use futures::StreamExt;
    /// let mut shell = s.pty(24, 80).await?;
    /// shell.control.send_stdin(b"echo $((6 * 7)); exit 3\n").await?;
    /// let mut screen = Vec::new();
    /// while let Some(event) = shell.events.next().await {
    ///     match event? {
    ///         ExecEvent::Exit(r) => assert_eq!(r.exit_code, 3),
    ///         ExecEvent::Stdout(b) | ExecEvent::Stderr(b) => screen.extend_from_slice(&b),
    ///     }
    /// }
    /// assert!(String::from_utf8_lossy(&screen).contains("42"));
    /// # Ok(()) }
    /// ```
    pub async fn pty(&self, rows: u16, cols: u16) -> Result<Spawned> {
        self.pty_with(rows, cols, SpawnOptions::new()).await
    }

    /// [`Session::pty`] with `options`' environment and working directory
    /// (its `TERM` overrides `xterm-256color`) and time limit.
    pub async fn pty_with(&self, rows: u16, cols: u16, options: SpawnOptions) -> Result<Spawned> {
        let mut options = options.stdin(true).pty(rows, cols);
        if !options.env.iter().any(|(name, _)| name == "TERM") {
            options = options.env("TERM", DEFAULT_TERM);
        }
        self.spawn(INTERACTIVE_SHELL, options).await
    }

    /// Starts `command` (run by `/bin/sh -c`) and returns at once with its
    /// pid, a handle to feed and signal it, and its output as a stream.
    /// Many may run at once, beside other requests.
    ///
    /// ```no_run
    /// # async fn demo(s: &dockhand::session::Session) -> dockhand::Result<()> {
    /// use dockhand::session::{ExecEvent, SpawnOptions};
    /// use futures::StreamExt;
    /// let mut p = s.spawn("cat", SpawnOptions::new().stdin(true)).await?;
    /// p.control.send_stdin(b"hi\n").await?;
    /// p.control.close_stdin().await?;
    /// while let Some(event) = p.events.next().await {
    ///     if let ExecEvent::Exit(r) = event? { assert_eq!(r.exit_code, 0); }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn spawn(&self, command: &str, options: SpawnOptions) -> Result<Spawned> {
        let c = &self.inner.config;
        let cwd = match &options.cwd {
            None => None,
            Some(dir) => Some(self.resolve_path(dir, "working directory outside")?),
        };
        let env: BTreeMap<String, String> = options.env.iter().cloned().collect();
        let mut id = 0;
        let mut rx = self
            .request(|assigned| {
                id = assigned;
                Request::Exec {
                    id: assigned,
                    command: command.to_string(),
                    cwd,
                    env,
                    stdin: None,
                    timeout_s: options.timeout.map(|t| t.as_secs_f64()),
                    output_limit: 0,
                    stream: true,
                    keep_stdin: options.stdin,
                    report_pid: true,
                    pty: options.pty,
                }
            })
            .await?;
        let limit = c.request_timeout;
        let pid = match tokio::time::timeout(limit, rx.recv()).await {
            Err(_) => return Err(self.unanswered("starting a command", limit)),
            Ok(None) => return Err(self.gone()),
            Ok(Some(Reply::Started { pid, .. })) => pid,
            Ok(Some(Reply::Error { kind, message, .. })) => {
                return Err(self.agent_error("", &kind, message))
            }
            Ok(Some(other)) => {
                return Err(Error::SessionUnavailable {
                    reason: format!("unexpected reply from the session agent: {other:?}"),
                })
            }
        };
        let session = self.clone();
        let started = Instant::now();
        let timeout = options.timeout;
        let events = futures::stream::unfold(Some(rx), move |rx| {
            let session = session.clone();
            async move {
                let mut rx = rx?;
                match rx.recv().await {
                    Some(Reply::Chunk { stream, data, .. }) => {
                        let bytes = session.redact_bytes(unb64(&data).unwrap_or_default());
                        let event = if stream == "stderr" {
                            ExecEvent::Stderr(bytes)
                        } else {
                            ExecEvent::Stdout(bytes)
                        };
                        Some((Ok(event), Some(rx)))
                    }
                    Some(reply) => Some((
                        session
                            .finish_exec(reply, started, timeout)
                            .map(ExecEvent::Exit),
                        None,
                    )),
                    None => Some((Err(session.gone()), None)),
                }
            }
        })
        .boxed();
        Ok(Spawned {
            pid,
            control: ProcessControl {
                session: self.clone(),
                id,
            },
            events,
        })
    }

    async fn send_input(&self, id: u64, data: &[u8], close: bool) -> Result<()> {
        self.write_line(&protocol::encode(&Request::Input {
            id,
            data: b64(data),
            close,
        }))
        .await
    }

    /// Writes one request line that expects no answer.
    pub(super) async fn write_line(&self, line: &[u8]) -> Result<()> {
        let conn = self.conn()?;
        let limit = self.inner.config.request_timeout;
        match conn.send_line(line.to_vec(), limit).await? {
            Some(()) => Ok(()),
            None => Err(self.unanswered("a request", limit)),
        }
    }
}
