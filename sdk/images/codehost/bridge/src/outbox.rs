//! The bridge's way to the host: lines, written in the order they are sent.
//!
//! On the host's socket a line goes out from the task that sends it, at
//! once, when nothing sent before it still waits. Through a channel, a
//! result waited for every task the runtime polled first (the next
//! interpreter's prelude, the last one's finish): tens of microseconds on a
//! round trip of a few hundred. What the socket does not take at once is
//! queued, and a writer task sends it, in order, with whatever is sent
//! meanwhile. On stdin/stdout (no socket) every line goes through that
//! writer: stdout has no write that cannot wait.

use std::io::ErrorKind;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::{mpsc, Notify};

use crate::lock;

/// Where the bridge's lines go.
pub enum Outbox {
    Socket(Arc<SocketOut>),
    Stdout(mpsc::UnboundedSender<Vec<u8>>),
}

impl Outbox {
    /// Lines to the host's socket; its writer task is started here.
    pub fn socket(stream: OwnedWriteHalf) -> Self {
        let out = Arc::new(SocketOut {
            stream,
            queue: Mutex::default(),
            wake: Notify::new(),
        });
        tokio::spawn(drain(out.clone()));
        Outbox::Socket(out)
    }

    /// Lines to stdout, through a writer task started here.
    pub fn stdout() -> Self {
        let (lines, queued) = mpsc::unbounded_channel();
        tokio::spawn(write_lines(tokio::io::stdout(), queued));
        Outbox::Stdout(lines)
    }

    /// Sends `bytes` (whole lines) after everything sent before.
    pub fn send(&self, bytes: Vec<u8>) {
        match self {
            Outbox::Socket(out) => out.send(&bytes),
            // Only fails once the writer is gone, when nobody is listening anyway.
            Outbox::Stdout(lines) => {
                let _ = lines.send(bytes);
            }
        }
    }
}

/// The host's socket and what it has not taken yet.
pub struct SocketOut {
    stream: OwnedWriteHalf,
    queue: Mutex<Queue>,
    wake: Notify,
}

#[derive(Default)]
struct Queue {
    /// Bytes not written yet, in order.
    pending: Vec<u8>,
    /// The writer task holds bytes taken from `pending` and not yet
    /// written: nothing may overtake them.
    writing: bool,
}

impl SocketOut {
    fn send(&self, bytes: &[u8]) {
        let mut queue = lock(&self.queue);
        let mut rest = bytes;
        if queue.pending.is_empty() && !queue.writing {
            while !rest.is_empty() {
                match self.stream.try_write(rest) {
                    Ok(0) => break,
                    Ok(n) => rest = &rest[n..],
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    // The host is gone: nobody is listening.
                    Err(_) => std::process::exit(0),
                }
            }
            if rest.is_empty() {
                return;
            }
        }
        queue.pending.extend_from_slice(rest);
        drop(queue);
        self.wake.notify_one();
    }
}

/// Writes what `SocketOut::send` could not, as the socket takes it.
async fn drain(out: Arc<SocketOut>) {
    loop {
        out.wake.notified().await;
        loop {
            let batch = {
                let mut queue = lock(&out.queue);
                if queue.pending.is_empty() {
                    queue.writing = false;
                    break;
                }
                queue.writing = true;
                std::mem::take(&mut queue.pending)
            };
            let mut rest = &batch[..];
            while !rest.is_empty() {
                if out.stream.writable().await.is_err() {
                    std::process::exit(0);
                }
                match out.stream.try_write(rest) {
                    // A socket that takes nothing it is ready for is closed.
                    Ok(0) => std::process::exit(0),
                    Ok(n) => rest = &rest[n..],
                    Err(e)
                        if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
                    Err(_) => std::process::exit(0),
                }
            }
        }
    }
}

async fn write_lines(
    mut out: impl AsyncWrite + Unpin,
    mut lines: mpsc::UnboundedReceiver<Vec<u8>>,
) {
    while let Some(line) = lines.recv().await {
        let mut batch = line;
        // Whatever else is queued goes out in the same write.
        while let Ok(more) = lines.try_recv() {
            batch.extend_from_slice(&more);
        }
        if out.write_all(&batch).await.is_err() || out.flush().await.is_err() {
            std::process::exit(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncBufReadExt, BufReader};

    use super::*;

    fn line(i: usize) -> Vec<u8> {
        format!("{i:06} {}\n", "x".repeat(90)).into_bytes()
    }

    async fn expect_lines(reader: &mut BufReader<tokio::net::UnixStream>, from: usize, to: usize) {
        let mut got = Vec::new();
        for i in from..to {
            got.clear();
            reader.read_until(b'\n', &mut got).await.unwrap();
            assert_eq!(got, line(i), "line {i}");
        }
    }

    #[tokio::test]
    async fn lines_arrive_whole_and_in_order_past_a_full_socket() {
        let (ours, theirs) = tokio::net::UnixStream::pair().unwrap();
        let (_read, write) = ours.into_split();
        let out = Outbox::socket(write);
        let mut reader = BufReader::new(theirs);
        // About 2 MB sent before anything is read: far more than a socket
        // buffers, so most of it waits in the queue behind a partial write.
        for i in 0..20_000 {
            out.send(line(i));
        }
        let Outbox::Socket(socket) = &out else {
            unreachable!()
        };
        assert!(
            !lock(&socket.queue).pending.is_empty(),
            "nothing was queued"
        );
        expect_lines(&mut reader, 0, 20_000).await;
        // Drained: the next line goes out from the sender itself.
        tokio::task::yield_now().await;
        out.send(line(20_000));
        assert!(lock(&socket.queue).pending.is_empty());
        expect_lines(&mut reader, 20_000, 20_001).await;
    }
}
