//! A file written from a stream, in bounded memory: pieces of at most
//! [`PIECE`] go to a temporary file beside the target as they arrive, each
//! at its offset, a few in flight at once, and the temporary file replaces
//! the target once the stream has ended. A stream that fails, runs past its
//! limit or is dropped leaves the target as it was and the temporary file
//! removed.

use futures::stream::FuturesUnordered;

use super::*;

/// The most of a stream held before it is sent on.
const PIECE: usize = 1 << 20;
/// Pieces sent and not yet written: the agent writes them in parallel, and
/// the next is on its way while one is written.
const IN_FLIGHT: usize = 3;

impl Session {
    /// Writes `path` from `chunks` as they come, holding at most about a
    /// MiB of them at a time, and returns how many bytes were written. The
    /// file appears whole or not at all: until the stream ends it is
    /// written under a temporary name beside `path`. More than `limit`
    /// bytes is [`FileErrorKind::TooLarge`]; a chunk that is an error ends
    /// the write with that error.
    ///
    /// ```no_run
    /// # async fn f(session: dockhand::session::Session) -> dockhand::Result<()> {
    /// use bytes::Bytes;
    /// let pieces = futures::stream::iter(
    ///     ["a,b\n", "1,2\n"].map(|p| Ok::<_, std::io::Error>(Bytes::from(p))),
    /// );
    /// let written = session.write_file_from("data.csv", pieces, 1 << 30).await?;
    /// assert_eq!(written, 8);
    /// # Ok(()) }
    /// ```
    pub async fn write_file_from<S, E>(&self, path: &str, mut chunks: S, limit: u64) -> Result<u64>
    where
        S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let target = self.resolve_path(path, "outside")?;
        let (dir, name) = target.rsplit_once('/').unwrap_or(("", target.as_str()));
        let temporary = format!(
            "{dir}/.{name}.dockhand-upload-{}",
            uuid::Uuid::new_v4().simple()
        );
        let mut guard = Unfinished {
            session: self.clone(),
            path: Some(temporary.clone()),
        };
        let mut held: Vec<u8> = Vec::with_capacity(PIECE);
        let mut received: u64 = 0;
        let mut sent: u64 = 0;
        let mut flying = FuturesUnordered::new();
        loop {
            let next = chunks.next().await;
            let end = next.is_none();
            if let Some(chunk) = next {
                let chunk = chunk.map_err(|e| {
                    Error::io(
                        "reading a file to write",
                        std::io::Error::other(e.to_string()),
                    )
                })?;
                received += chunk.len() as u64;
                if received > limit {
                    return Err(Error::SessionFile {
                        path: path.to_string(),
                        kind: FileErrorKind::TooLarge,
                        message: format!("more than the limit of {limit} bytes"),
                    });
                }
                held.extend_from_slice(&chunk);
            }
            while held.len() >= PIECE || (end && !held.is_empty()) {
                if flying.len() >= IN_FLIGHT {
                    if let Some(done) = flying.next().await {
                        done?;
                    }
                }
                let piece: Vec<u8> = held.drain(..held.len().min(PIECE)).collect();
                let at = sent;
                sent += piece.len() as u64;
                if at == 0 {
                    // The first piece makes the file; the rest go after it.
                    self.write_piece(path, &temporary, piece, 0).await?;
                } else {
                    flying.push(self.write_piece(path, &temporary, piece, at));
                }
            }
            if end {
                break;
            }
        }
        if received == 0 {
            // An empty stream still makes its (empty) file.
            self.write_piece(path, &temporary, Vec::new(), 0).await?;
        }
        while let Some(done) = flying.next().await {
            done?;
        }
        self.rename(&temporary, &target).await?;
        guard.path = None;
        Ok(received)
    }

    async fn write_piece(
        &self,
        shown: &str,
        temporary: &str,
        piece: Vec<u8>,
        offset: u64,
    ) -> Result<()> {
        let data = b64(&piece);
        drop(piece);
        self.file_request(temporary, |id, path| Request::Write {
            id,
            path,
            data,
            offset: Some(offset),
        })
        .await
        .map(drop)
        .map_err(|e| match e {
            // The caller named `path`, not the temporary file.
            Error::SessionFile { kind, message, .. } => Error::SessionFile {
                path: shown.to_string(),
                kind,
                message: message.replace(temporary, shown),
            },
            other => other,
        })
    }
}

/// Removes a write's temporary file unless the write finished: on an
/// error, or when the write's future is dropped.
struct Unfinished {
    session: Session,
    path: Option<String>,
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        let Some(path) = self.path.take() else { return };
        let session = self.session.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = session.remove(&path).await {
                    tracing::warn!(path, error = %e, "removing an unfinished upload's temporary file");
                }
            });
        }
    }
}
