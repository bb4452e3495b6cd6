//! A long-lived helper in a session's container whose stdin stays open: the
//! kernel relay runs on one. Its stdout comes back as chunks; bytes go in
//! through `input` requests, which the agent writes in order.

use super::*;

/// One helper process and the replies about it.
pub(crate) struct Channel {
    /// The exec's request id, which its inputs name.
    pub(crate) id: u64,
    /// Chunks of its stdout and stderr, then its exit.
    pub(crate) replies: mpsc::UnboundedReceiver<Reply>,
}

impl Session {
    /// Starts `command` with its stdin kept open and its output streamed,
    /// with no time limit and nothing captured: it lives as long as it wants.
    pub(crate) async fn open_channel(
        &self,
        command: &str,
        env: BTreeMap<String, String>,
    ) -> Result<Channel> {
        let mut id = 0;
        let replies = self
            .request(|assigned| {
                id = assigned;
                Request::Exec {
                    id: assigned,
                    command: command.to_string(),
                    cwd: None,
                    env,
                    stdin: None,
                    timeout_s: None,
                    output_limit: 0,
                    stream: true,
                    keep_stdin: true,
                    report_pid: false,
                    pty: None,
                }
            })
            .await?;
        Ok(Channel { id, replies })
    }

    /// The channels running in the container, as its agent started them:
    /// what an earlier host of a kept session left (its kernel relay).
    pub(crate) async fn open_channels(&self) -> Result<Vec<protocol::OpenChannel>> {
        let _busy = self.busy().await?;
        let limit = self.inner.config.request_timeout;
        let mut rx = self.request(|id| Request::Channels { id }).await?;
        match tokio::time::timeout(limit, rx.recv()).await {
            Err(_) => Err(self.unanswered("a channels request", limit)),
            Ok(Some(Reply::Ok { channels, .. })) => Ok(channels.unwrap_or_default()),
            Ok(Some(Reply::Error { message, .. })) => Err(Error::SessionUnavailable {
                reason: format!("listing the session's channels: {message}"),
            }),
            Ok(_) => Err(self.gone()),
        }
    }

    /// Takes over channel `id`, which an earlier host opened: its later
    /// output comes here (what it wrote with no host attached is gone).
    pub(crate) fn adopt_channel(&self, id: u64) -> Result<Channel> {
        let conn = self.conn()?;
        let (tx, replies) = mpsc::unbounded_channel();
        match lock(&conn.routes).as_mut() {
            Some(routes) => routes.insert(id, tx),
            None => return Err(self.gone()),
        };
        Ok(Channel { id, replies })
    }

    /// Writes `data` to the stdin of the channel `id`.
    pub(crate) async fn channel_input(&self, id: u64, data: &[u8]) -> Result<()> {
        let conn = self.conn()?;
        let line = protocol::encode(&Request::Input {
            id,
            data: b64(data),
            close: false,
        });
        let limit = self.inner.config.request_timeout;
        match conn.send_line(line, limit).await? {
            Some(()) => Ok(()),
            None => Err(self.unanswered("a channel's input", limit)),
        }
    }

    /// The names and values of the session's secrets, for redaction.
    pub(crate) fn secret_values(&self) -> Arc<[(String, String)]> {
        lock(&self.inner.secrets).clone().into()
    }
}
