//! Ports inside a session, reached from the host over the agent's channel:
//! a dev server, a notebook UI or a WebSocket in a session that has no
//! network at all. [`Session::connect`] gives one connection as a byte
//! stream; [`Session::expose`] gives a local address whose every
//! connection reaches the port.
//!
//! Each direction keeps at most [`WINDOW`] bytes in flight (the agent acks
//! what it wrote; this side acks what its reader took), so a slow reader on
//! either side holds up the writer rather than filling memory.

use std::net::SocketAddr;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, DuplexStream, ReadBuf};
use tokio::sync::Semaphore;

use super::*;

/// Bytes in flight each way per connection, at most (the agent's window).
const WINDOW: usize = 1 << 20;
/// Bytes read from the local side per input line.
const PIECE: usize = 32 << 10;

/// One connection to a port inside a session: read what the server sends,
/// write what it should get; `shutdown` ends the host's side. Dropping it
/// cuts the connection.
pub struct PortStream {
    port: u16,
    inner: DuplexStream,
}

impl std::fmt::Debug for PortStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PortStream")
            .field("port", &self.port)
            .finish()
    }
}

impl AsyncRead for PortStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for PortStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A local address that reaches a port inside a session: each connection
/// made to it is a [`Session::connect`]. Listens until dropped; dropping
/// it also cuts the connections it carries.
#[derive(Debug)]
pub struct ExposedPort {
    port: u16,
    address: SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

impl ExposedPort {
    /// The port inside the session.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Where to connect on the host (on the loopback interface).
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// `http://<local address>`, for an HTTP server inside.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }
}

impl Drop for ExposedPort {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl Session {
    /// Opens a connection to `port` on the session's loopback, carried over
    /// the agent's channel (the session needs no network). Fails with
    /// [`Error::PortUnreachable`] when nothing listens there.
    ///
    /// ```no_run
    /// # async fn demo(s: &dockhand::session::Session) -> dockhand::Result<()> {
    /// use tokio::io::{AsyncReadExt, AsyncWriteExt};
    /// s.spawn("python3 -m http.server 8000", Default::default()).await?;
    /// let mut conn = s.connect(8000).await?;
    /// conn.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    /// let mut page = Vec::new();
    /// conn.read_to_end(&mut page).await.unwrap();
    /// assert!(page.starts_with(b"HTTP/1.0 200"));
    /// # Ok(()) }
    /// ```
    pub async fn connect(&self, port: u16) -> Result<PortStream> {
        if port == 0 {
            return Err(Error::InvalidSpec {
                what: "port",
                message: "a port is a number from 1 to 65535".into(),
            });
        }
        let mut id = 0;
        let mut replies = self
            .request(|assigned| {
                id = assigned;
                Request::Connect { id: assigned, port }
            })
            .await?;
        let limit = self.inner.config.request_timeout;
        match tokio::time::timeout(limit, replies.recv()).await {
            Err(_) => {
                let _ = self
                    .write_line(&protocol::encode(&Request::Hangup { id }))
                    .await;
                return Err(self.unanswered("a connection", limit));
            }
            Ok(None) => return Err(self.gone()),
            Ok(Some(Reply::Connected { .. })) => {}
            Ok(Some(Reply::Error { message, .. })) => {
                return Err(Error::PortUnreachable { port, message });
            }
            Ok(Some(other)) => {
                return Err(Error::SessionUnavailable {
                    reason: format!("unexpected reply from the session agent: {other:?}"),
                })
            }
        }
        let (ours, theirs) = tokio::io::duplex(PIECE * 2);
        tokio::spawn(relay(self.clone(), id, replies, ours));
        Ok(PortStream {
            port,
            inner: theirs,
        })
    }

    /// Listens on a free port of the host's loopback; each connection made
    /// there reaches `port` inside the session. Checks first that something
    /// answers there.
    ///
    /// ```no_run
    /// # async fn demo(s: &dockhand::session::Session) -> dockhand::Result<()> {
    /// s.spawn("python3 -m http.server 8000", Default::default()).await?;
    /// let exposed = s.expose(8000).await?;
    /// println!("open {}", exposed.url());
    /// # Ok(()) }
    /// ```
    pub async fn expose(&self, port: u16) -> Result<ExposedPort> {
        drop(self.connect(port).await?);
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(|e| Error::io("listening on the host's loopback", e))?;
        let address = listener
            .local_addr()
            .map_err(|e| Error::io("listening on the host's loopback", e))?;
        // A weak handle: an exposed port does not keep a dropped session's
        // container alive.
        let session = Arc::downgrade(&self.inner);
        let accepting = tokio::spawn(async move {
            let mut carried = tokio::task::JoinSet::new();
            while let Ok((mut local, _)) = listener.accept().await {
                let Some(inner) = session.upgrade() else {
                    break;
                };
                let session = Session { inner };
                carried.spawn(async move {
                    let _ = local.set_nodelay(true);
                    match session.connect(port).await {
                        Ok(mut remote) => {
                            let _ = tokio::io::copy_bidirectional(&mut local, &mut remote).await;
                        }
                        Err(e) => tracing::debug!(port, error = %e, "an exposed port's connection"),
                    }
                });
                // Finished connections are not kept.
                while carried.try_join_next().is_some() {}
            }
        });
        Ok(ExposedPort {
            port,
            address,
            accepting,
        })
    }
}

/// Carries one connection between `local` (the other end of the caller's
/// [`PortStream`]) and the agent, until both sides ended or either failed;
/// then hangs the connection up.
async fn relay(
    session: Session,
    id: u64,
    mut replies: mpsc::UnboundedReceiver<Reply>,
    local: DuplexStream,
) {
    let (mut from_local, mut to_local) = tokio::io::split(local);
    // Bytes the agent may still take before it acks some.
    let room = Arc::new(Semaphore::new(WINDOW));
    let outbound = {
        let (session, room) = (session.clone(), room.clone());
        async move {
            let mut piece = vec![0u8; PIECE];
            loop {
                let n = match from_local.read(&mut piece).await {
                    Ok(0) | Err(_) => 0,
                    Ok(n) => n,
                };
                if n == 0 {
                    let _ = session
                        .write_line(&protocol::encode(&Request::Input {
                            id,
                            data: String::new(),
                            close: true,
                        }))
                        .await;
                    return;
                }
                match room.acquire_many(n as u32).await {
                    Ok(permits) => permits.forget(),
                    Err(_) => return,
                }
                session.mark_active();
                let line = protocol::encode(&Request::Input {
                    id,
                    data: b64(&piece[..n]),
                    close: false,
                });
                if session.write_line(&line).await.is_err() {
                    return;
                }
            }
        }
    };
    let inbound = async {
        while let Some(reply) = replies.recv().await {
            match reply {
                Reply::Ack { bytes, .. } => {
                    room.add_permits(usize::try_from(bytes).unwrap_or(0).min(WINDOW))
                }
                Reply::Chunk { data, .. } => {
                    session.mark_active();
                    let bytes = unb64(&data).unwrap_or_default();
                    if to_local.write_all(&bytes).await.is_err() {
                        return;
                    }
                    let ack = Request::Ack {
                        id,
                        bytes: bytes.len() as u64,
                    };
                    if session.write_line(&protocol::encode(&ack)).await.is_err() {
                        return;
                    }
                }
                // The port closed its side (or the connection failed).
                _ => break,
            }
        }
        let _ = to_local.shutdown().await;
        room.close();
    };
    // The agent ends a connection when the port's side closed (or failed):
    // what the caller still writes has nowhere to go.
    let outbound = tokio::spawn(outbound);
    inbound.await;
    outbound.abort();
    let _ = session
        .write_line(&protocol::encode(&Request::Hangup { id }))
        .await;
}
