//! A file read as a stream, in bounded memory: pieces of at most
//! [`PIECE`] are asked for as the reader takes them, a few ahead, each its
//! own request with its own deadline. A slow reader holds the next piece
//! back instead of the session (nothing is asked for that is not wanted
//! soon), a large file costs no request longer than one piece, and a
//! reader that stops or goes away leaves the session as it was.

use std::collections::VecDeque;

use super::*;

/// The most one piece carries (the agent holds it to 4 MiB whatever is
/// asked): its reply is one line, which every other reply waits behind.
const PIECE: u64 = 2 << 20;
/// Pieces asked for and not yet taken by the reader.
const AHEAD: usize = 4;

/// One piece's bytes and the file's size when it was read; `None` from an
/// agent that reads whole files only (it sent the whole file).
type Piece = (Bytes, Option<u64>);

impl Session {
    /// Reads `path` as a stream of chunks of at most 2 MiB, asking the
    /// session for each a few ahead of the reader: memory stays bounded
    /// whatever the size, and each piece has the session's request limit,
    /// so a large file takes as long as it needs while a wedged session
    /// still fails within the limit. A file over `limit` bytes is
    /// [`FileErrorKind::TooLarge`] before any byte comes. The stream ends
    /// at the size the file had when its first piece was read (or where it
    /// ends, if it shrank). Dropping the stream stops the reading; the
    /// session is unaffected.
    ///
    /// ```no_run
    /// # async fn f(session: dockhand::session::Session) -> dockhand::Result<()> {
    /// use futures::StreamExt;
    /// let mut chunks = session.read_file_stream("data.bin", 1 << 30);
    /// let mut total = 0;
    /// while let Some(chunk) = chunks.next().await {
    ///     total += chunk?.len();
    /// }
    /// println!("{total} bytes");
    /// # Ok(()) }
    /// ```
    pub fn read_file_stream(
        &self,
        path: &str,
        limit: u64,
    ) -> futures::stream::BoxStream<'static, Result<Bytes>> {
        let reading = Reading {
            session: self.clone(),
            path: path.to_string(),
            limit,
            asked: 0,
            size: None,
            ahead: VecDeque::new(),
            done: false,
        };
        futures::stream::unfold(reading, |mut reading| async move {
            let next = reading.next().await?;
            Some((next, reading))
        })
        .boxed()
    }

    /// Writes `path` to `to` as it is read (see
    /// [`read_file_stream`](Self::read_file_stream)); returns how many
    /// bytes were written. A file over `limit` bytes is refused before
    /// anything is written.
    ///
    /// ```no_run
    /// # async fn f(session: dockhand::session::Session) -> dockhand::Result<()> {
    /// let mut out = tokio::fs::File::create("/tmp/report.html").await.unwrap();
    /// let written = session.read_file_to("report.html", &mut out, 1 << 30).await?;
    /// # Ok(()) }
    /// ```
    pub async fn read_file_to<W>(&self, path: &str, to: &mut W, limit: u64) -> Result<u64>
    where
        W: AsyncWrite + Unpin + ?Sized,
    {
        let mut chunks = self.read_file_stream(path, limit);
        let mut written = 0u64;
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk?;
            to.write_all(&chunk)
                .await
                .map_err(|e| Error::io("writing a file read from the session", e))?;
            written += chunk.len() as u64;
        }
        to.flush()
            .await
            .map_err(|e| Error::io("writing a file read from the session", e))?;
        Ok(written)
    }

    /// One piece of `path` at `offset`.
    async fn read_piece(&self, path: &str, offset: u64, limit: u64) -> Result<Piece> {
        let reply = self
            .file_request(path, |id, path| Request::Read {
                id,
                path,
                max_bytes: limit,
                offset: Some(offset),
                length: Some(PIECE),
            })
            .await?;
        match reply {
            Reply::Ok { data, size, .. } => {
                let data = unb64(data.as_deref().unwrap_or_default())
                    .map_err(|e| Error::SessionUnavailable { reason: e })?;
                Ok((Bytes::from(data), size))
            }
            other => Err(Error::SessionUnavailable {
                reason: format!("unexpected reply from the session agent: {other:?}"),
            }),
        }
    }
}

/// A streamed read under way.
struct Reading {
    session: Session,
    path: String,
    limit: u64,
    /// Where the next piece to ask for starts.
    asked: u64,
    /// The file's size, from the first piece.
    size: Option<u64>,
    /// Pieces asked for, in file order, each running on a task of its own
    /// (aborted when the read is dropped).
    ahead: VecDeque<(u64, Asked)>,
    done: bool,
}

/// A piece's request, running.
struct Asked(tokio::task::JoinHandle<Result<Piece>>);

impl Drop for Asked {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Reading {
    fn ask(&mut self) {
        let (session, path, offset, limit) = (
            self.session.clone(),
            self.path.clone(),
            self.asked,
            self.limit,
        );
        let task = tokio::spawn(async move { session.read_piece(&path, offset, limit).await });
        self.ahead.push_back((offset, Asked(task)));
        self.asked += PIECE;
    }

    fn stop(&mut self) {
        self.done = true;
        self.ahead.clear();
    }

    async fn next(&mut self) -> Option<Result<Bytes>> {
        if self.done {
            return None;
        }
        if self.ahead.is_empty() {
            self.ask();
        }
        let (offset, mut asked) = self.ahead.pop_front()?;
        let piece = match (&mut asked.0).await {
            Ok(piece) => piece,
            Err(e) => Err(Error::io(
                "reading a file from the session",
                std::io::Error::other(e.to_string()),
            )),
        };
        let (data, size) = match piece {
            Ok(piece) => piece,
            Err(e) => {
                self.stop();
                return Some(Err(e));
            }
        };
        let Some(size) = size else {
            // An agent that reads whole files: this was all of it.
            self.stop();
            return Some(Ok(data));
        };
        let size = *self.size.get_or_insert(size);
        let end = offset + data.len() as u64;
        if data.len() < PIECE as usize || end >= size {
            // The end of the file as it was first seen (or where it ends
            // now, if it shrank).
            self.stop();
            let keep = data.len().min(size.saturating_sub(offset) as usize);
            return (keep > 0 || offset == 0).then(|| Ok(data.slice(..keep)));
        }
        while self.ahead.len() < AHEAD && self.asked < size {
            self.ask();
        }
        Some(Ok(data))
    }
}
