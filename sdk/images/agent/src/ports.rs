//! Connections to ports inside the container, carried over the agent's
//! channel: the host reaches a server in a session that has no network.
//!
//! `connect {id, port}` opens a TCP connection to the port on the
//! container's loopback and answers `connected`; the port's bytes come as
//! `chunk`s, then `ok` when it closed. The host's bytes arrive as `input`s
//! (acked once written) and `close: true` ends the host's side; `hangup`
//! cuts the connection. Each direction keeps at most [`WINDOW`] bytes
//! unacked, so neither side buffers more than that for a slow reader.

use std::io::Read;
use std::net::{Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::commands::{feed_inputs, Sink};
use crate::reply::{b64, send, Refused};
use crate::sys::reset_on_close;
use crate::{agent, locked};

/// Bytes sent to the host and not yet acked, per connection, at most.
pub const WINDOW: u64 = 1 << 20;
/// How long a port has to accept the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One connection: its socket and the bytes the host has yet to ack.
pub struct Connection {
    socket: Arc<TcpStream>,
    unacked: Mutex<u64>,
    acked: Condvar,
}

fn port_of(req: &Value) -> Result<u16, Refused> {
    req.get("port")
        .and_then(Value::as_u64)
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
        .ok_or_else(|| Refused::new("protocol", "`port` must be a number from 1 to 65535"))
}

/// Opens the connection and relays the port's bytes until it closes; the
/// reply that ends the request (`ok`, or a refusal) is the caller's.
pub fn connect(req: &Value) -> Result<(), Refused> {
    let rid = req
        .get("id")
        .and_then(Value::as_u64)
        .ok_or_else(|| Refused::missing("id"))?;
    let port = port_of(req)?;
    let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
    let socket = TcpStream::connect_timeout(&v4, CONNECT_TIMEOUT)
        .or_else(|first| TcpStream::connect_timeout(&v6, CONNECT_TIMEOUT).map_err(|_| first))
        .map_err(|e| {
            Refused::new(
                "refused",
                format!("nothing in the session answers on port {port}: {e}"),
            )
        })?;
    let _ = socket.set_nodelay(true);
    let socket = Arc::new(socket);
    let connection = Arc::new(Connection {
        socket: socket.clone(),
        unacked: Mutex::new(0),
        acked: Condvar::new(),
    });
    agent().lock_ports().insert(rid, connection.clone());
    let relayed = (|| -> std::io::Result<()> {
        feed_inputs(rid, Sink::Socket(socket.clone()))?;
        send(&json!({"type": "connected", "id": rid}));
        let mut buffer = vec![0u8; 64 << 10];
        loop {
            {
                let mut unacked = locked(&connection.unacked);
                while *unacked >= WINDOW {
                    unacked = connection
                        .acked
                        .wait(unacked)
                        .unwrap_or_else(|e| e.into_inner());
                }
            }
            let n = match (&*socket).read(&mut buffer) {
                Ok(0) | Err(_) => return Ok(()),
                Ok(n) => n,
            };
            *locked(&connection.unacked) += n as u64;
            send(
                &json!({"type": "chunk", "id": rid, "stream": "stdout", "data": b64(&buffer[..n])}),
            );
        }
    })();
    agent().lock_ports().remove(&rid);
    let _ = socket.shutdown(Shutdown::Both);
    if let Some(pending) = agent().lock_inputs().get(&rid) {
        let _ = pending.send(None);
    }
    match relayed {
        Ok(()) => {
            send(&json!({"type": "ok", "id": rid}));
            Ok(())
        }
        Err(e) => Err(Refused::os(&format!("port {port}"), &e)),
    }
}

/// The host wrote out `bytes` of a connection's output (on the reading
/// loop): the relay may send that many more.
pub fn ack(req: &Value) {
    let (Some(rid), Some(bytes)) = (
        req.get("id").and_then(Value::as_u64),
        req.get("bytes").and_then(Value::as_u64),
    ) else {
        return;
    };
    if let Some(c) = agent().lock_ports().get(&rid) {
        let mut unacked = locked(&c.unacked);
        *unacked = unacked.saturating_sub(bytes);
        c.acked.notify_all();
    }
}

/// Cuts a connection (on the reading loop): its relay ends and says `ok`.
/// A relay waiting for acks that will never come wakes up too.
pub fn hangup(req: &Value) {
    let Some(rid) = req.get("id").and_then(Value::as_u64) else {
        return;
    };
    if let Some(c) = agent().lock_ports().get(&rid) {
        let _ = reset_on_close(c.socket.as_raw_fd());
        let _ = c.socket.shutdown(Shutdown::Both);
        *locked(&c.unacked) = 0;
        c.acked.notify_all();
    }
}
