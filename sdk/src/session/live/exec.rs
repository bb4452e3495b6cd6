//! Running commands in a session: requests, streaming, deadlines.

use futures::stream::{BoxStream, StreamExt};

use super::*;
use crate::sandbox::{redact_cut, Cut};

impl Session {
    /// Runs a command and streams its output; the last event is the exit.
    /// A timeout kills the command's process group and ends the stream with
    /// [`Error::CommandTimeout`]; the session survives. The stream is `Unpin`:
    /// call `.next()` on it directly.
    pub async fn exec_stream(
        &self,
        command: &str,
        options: ExecOptions,
    ) -> Result<BoxStream<'static, Result<ExecEvent>>> {
        let busy = self.busy().await?;
        let started = Instant::now();
        let timeout = options.timeout.or(self.inner.config.exec_timeout);
        let rx = self.send_exec(command, &options, timeout, true).await?;
        let deadline = timeout.map(|t| started + t + exec_grace(t));
        Ok(
            futures::stream::unfold(Some((rx, busy, started)), move |state| async move {
                let (mut rx, busy, started) = state?;
                let next = match deadline {
                    None => Ok(rx.recv().await),
                    Some(at) => tokio::time::timeout_at(at.into(), rx.recv()).await,
                };
                let session = busy.0.clone();
                match next {
                    Ok(Some(Reply::Chunk { stream, data, .. })) => {
                        let bytes = session.redact_bytes(unb64(&data).unwrap_or_default());
                        let event = if stream == "stderr" {
                            ExecEvent::Stderr(bytes)
                        } else {
                            ExecEvent::Stdout(bytes)
                        };
                        Some((Ok(event), Some((rx, busy, started))))
                    }
                    Ok(Some(reply)) => {
                        drop(busy);
                        let out = session.finish_exec(reply, started, timeout);
                        Some((out.map(ExecEvent::Exit), None))
                    }
                    Ok(None) => {
                        drop(busy);
                        Some((Err(session.gone()), None))
                    }
                    Err(_) => {
                        drop(busy);
                        let limit = timeout.map(|t| t + exec_grace(t)).unwrap_or_default();
                        Some((Err(session.unanswered("a command", limit)), None))
                    }
                }
            })
            .boxed(),
        )
    }

    pub(super) async fn send_exec(
        &self,
        command: &str,
        options: &ExecOptions,
        timeout: Option<Duration>,
        stream: bool,
    ) -> Result<mpsc::UnboundedReceiver<Reply>> {
        let c = &self.inner.config;
        let cwd = match &options.cwd {
            None => None,
            Some(dir) => Some(self.resolve_path(dir, "working directory outside")?),
        };
        let env: BTreeMap<String, String> = options.env.iter().cloned().collect();
        let stdin = options.stdin.as_deref().map(b64);
        let limit = c.output_limit;
        self.request(|id| Request::Exec {
            id,
            command: command.to_string(),
            cwd,
            env,
            stdin,
            timeout_s: timeout.map(|t| t.as_secs_f64()),
            output_limit: limit,
            stream,
            keep_stdin: false,
            report_pid: false,
            pty: None,
        })
        .await
    }

    /// A streamed chunk with secret values redacted: whole ones, and the
    /// parts of one that the chunk's edges cut (4 characters or more).
    pub(super) fn redact_bytes(&self, bytes: Vec<u8>) -> Bytes {
        let secrets = lock(&self.inner.secrets);
        if secrets.is_empty() {
            return Bytes::from(bytes);
        }
        let edges = Cut {
            start: true,
            end: true,
        };
        let text = String::from_utf8_lossy(&bytes);
        Bytes::from(redact_cut(&text, &secrets, edges).into_bytes())
    }

    pub(super) fn finish_exec(
        &self,
        reply: Reply,
        started: Instant,
        timeout: Option<Duration>,
    ) -> Result<ExecResult> {
        match reply {
            Reply::Exit {
                code,
                timed_out,
                stdout,
                stderr,
                stdout_truncated,
                stderr_truncated,
                pids_exhausted,
                ..
            } => {
                lock(&self.inner.status).commands += 1;
                // The agent keeps the head of each stream: a cut is at its end.
                let text = |b64: &str, truncated: bool| {
                    let lossy =
                        String::from_utf8_lossy(&unb64(b64).unwrap_or_default()).into_owned();
                    let cut = Cut {
                        start: false,
                        end: truncated,
                    };
                    redact_cut(&lossy, &lock(&self.inner.secrets), cut)
                };
                let (stdout, stderr) = (
                    text(&stdout, stdout_truncated),
                    text(&stderr, stderr_truncated),
                );
                if pids_exhausted {
                    return Err(Error::ProcessLimit {
                        limit: self.inner.config.resources.pids,
                        stdout,
                        stderr,
                    });
                }
                if timed_out {
                    return Err(Error::CommandTimeout {
                        timeout: timeout.unwrap_or_default(),
                        stdout,
                        stderr,
                    });
                }
                Ok(ExecResult {
                    exit_code: code,
                    stdout,
                    stderr,
                    stdout_truncated,
                    stderr_truncated,
                    duration: started.elapsed(),
                })
            }
            Reply::Error { kind, message, .. } => Err(self.agent_error("", &kind, message)),
            other => Err(Error::SessionUnavailable {
                reason: format!("unexpected reply from the session agent: {other:?}"),
            }),
        }
    }
}

/// How long past a command's own timeout the host waits for the agent's
/// answer (the agent answers about 0.5 s after killing a command).
pub(super) fn exec_grace(timeout: Duration) -> Duration {
    Duration::from_secs(1) + timeout / 10
}
