//! Watching a directory in a session: inotify in the session's agent, so a
//! file made and removed at once is seen (no listing is compared).

use std::collections::VecDeque;
use std::task::{Context, Poll};

use crate::session::protocol::WatchedChange;

use super::*;

/// What happened to a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FileEventKind {
    /// Made (or moved in).
    Create,
    /// Written to.
    Write,
    /// Removed.
    Remove,
    /// Moved away (its new name, if watched, is a `Create`).
    Rename,
    /// Its permissions or owner changed.
    Chmod,
    /// The kernel dropped events (too many at once): list the directory
    /// again to know where things stand.
    Overflow,
}

impl FileEventKind {
    fn from_agent(kind: &str) -> Option<Self> {
        Some(match kind {
            "create" => Self::Create,
            "write" => Self::Write,
            "remove" => Self::Remove,
            "rename" => Self::Rename,
            "chmod" => Self::Chmod,
            "overflow" => Self::Overflow,
            _ => return None,
        })
    }
}

/// One change in a watched directory.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileEvent {
    /// The path, relative to the watched directory (empty for `Overflow`).
    pub path: String,
    /// What happened.
    pub kind: FileEventKind,
}

/// The changes in a directory, as they happen: a stream of [`FileEvent`]s
/// that ends with an error if the directory goes. Dropping it ends the
/// watch in the session.
pub struct FileWatch {
    session: Session,
    id: u64,
    replies: mpsc::UnboundedReceiver<Reply>,
    ready: VecDeque<FileEvent>,
    path: String,
    done: bool,
}

impl std::fmt::Debug for FileWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileWatch")
            .field("path", &self.path)
            .finish()
    }
}

impl Stream for FileWatch {
    type Item = Result<FileEvent>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if let Some(event) = self.ready.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            if self.done {
                return Poll::Ready(None);
            }
            match self.replies.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Reply::Events { events, .. })) => {
                    self.ready.extend(events.into_iter().filter_map(
                        |WatchedChange { name, kind }| {
                            Some(FileEvent {
                                path: name,
                                kind: FileEventKind::from_agent(&kind)?,
                            })
                        },
                    ));
                }
                Poll::Ready(Some(Reply::Error { kind, message, .. })) => {
                    self.done = true;
                    let e = self.session.agent_error(&self.path, &kind, message);
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => {
                    self.done = true;
                    return Poll::Ready(Some(Err(Error::SessionUnavailable {
                        reason: "the session's container or agent stopped".into(),
                    })));
                }
                // `ok`: the watch ended.
                Poll::Ready(Some(_)) => self.done = true,
            }
        }
    }
}

impl Drop for FileWatch {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let (session, id) = (self.session.clone(), self.id);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = session
                    .write_line(&protocol::encode(&Request::Hangup { id }))
                    .await;
            });
        }
    }
}

impl Session {
    /// Watches the directory `path` (and, with `recursive`, every directory
    /// under it, those made later included) for changes, from the moment
    /// this returns. Events come from the kernel (inotify), so a file made
    /// and removed at once is seen.
    ///
    /// ```no_run
    /// # async fn demo(s: &dockhand::session::Session) -> dockhand::Result<()> {
    /// use dockhand::session::{FileEventKind, SessionApi};
    /// use futures::StreamExt;
    /// let mut changes = s.watch(".", true).await?;
    /// s.exec("mkdir -p out && echo hi > out/a.txt").await?;
    /// while let Some(event) = changes.next().await {
    ///     let event = event?;
    ///     if event.path == "out/a.txt" && event.kind == FileEventKind::Write {
    ///         break;
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn watch(&self, path: &str, recursive: bool) -> Result<FileWatch> {
        let resolved = self.resolve_path(path, "outside")?;
        let mut id = 0;
        let mut replies = self
            .request(|assigned| {
                id = assigned;
                Request::Watch {
                    id: assigned,
                    path: resolved,
                    recursive,
                }
            })
            .await?;
        let limit = self.inner.config.request_timeout;
        match tokio::time::timeout(limit, replies.recv()).await {
            Err(_) => Err(self.unanswered("a watch", limit)),
            Ok(None) => Err(self.gone()),
            Ok(Some(Reply::Watching { .. })) => Ok(FileWatch {
                session: self.clone(),
                id,
                replies,
                ready: VecDeque::new(),
                path: path.to_string(),
                done: false,
            }),
            Ok(Some(Reply::Error { kind, message, .. })) => {
                Err(self.agent_error(path, &kind, message))
            }
            Ok(Some(other)) => Err(Error::SessionUnavailable {
                reason: format!("unexpected reply from the session agent: {other:?}"),
            }),
        }
    }
}
