//! A direct channel to the compiled bridge: a Unix socket in a private
//! directory on this machine, bind-mounted into the code host's container.
//!
//! Every message over the attach stream passes through the daemon and its
//! shim both ways; a round trip costs about a quarter of a millisecond
//! there, more than an execution costs inside. When the daemon runs on this
//! machine, the host listens on a socket instead and the bridge connects to
//! it; its first line (`hello`) must carry the token the host put in the
//! bridge's settings, so nothing else on the machine can pose as it. When the
//! bridge cannot connect (a runtime such as gVisor keeps host sockets out)
//! it stays on the attach stream, and the host keeps listening there too.
//!
//! The directory lives only until the bridge connects (a connection needs no
//! path): an owner killed later leaves nothing on this machine's disk.

use std::os::unix::fs::PermissionsExt;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixListener;

use crate::engine::Mount;
use crate::error::{Error, Result};

/// Where the socket's directory appears inside the container.
const CONTAINER_DIR: &str = "/run/dockhand-bridge";
const SOCKET_NAME: &str = "bridge.sock";
const DIR_PREFIX: &str = "dockhand-bridge-";
/// A `hello` line longer than this is not the bridge's.
const HELLO_LIMIT: usize = 256;
/// Bytes taken from the socket per read.
const READ_CHUNK: usize = 64 * 1024;
const HELLO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// A socket waiting for the bridge.
pub(crate) struct Offer {
    listener: UnixListener,
    token: String,
    dir: SocketDir,
}

/// The socket's directory. Dropped (a start dropped before the bridge
/// connected), it is removed by dockhand's remover thread: unlinking and
/// removing a directory can wait on a busy filesystem, and a drop must not.
struct SocketDir(Option<tempfile::TempDir>);

impl SocketDir {
    fn path(&self) -> &std::path::Path {
        self.0
            .as_ref()
            .map_or(std::path::Path::new(""), |d| d.path())
    }

    /// Removes it now.
    fn close(mut self) -> std::io::Result<()> {
        self.0.take().map_or(Ok(()), tempfile::TempDir::close)
    }
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            crate::engine::submit_job(
                "the code host's socket directory".into(),
                Box::pin(async move { drop(dir) }),
            );
        }
    }
}

impl Offer {
    /// Listens in a fresh private directory.
    pub fn new() -> Result<Self> {
        remove_abandoned(&std::env::temp_dir());
        let dir = tempfile::Builder::new()
            .prefix(DIR_PREFIX)
            .tempdir()
            .map_err(|e| Error::io("making the code host's socket directory", e))?;
        // The bridge runs as an unprivileged user: it must reach the socket
        // (search on the directory, write on the socket); listing is not needed.
        set_mode(dir.path(), 0o711)?;
        let path = dir.path().join(SOCKET_NAME);
        let listener = UnixListener::bind(&path)
            .map_err(|e| Error::io("listening for the code host's bridge", e))?;
        set_mode(&path, 0o777)?;
        Ok(Self {
            listener,
            token: uuid::Uuid::new_v4().simple().to_string(),
            dir: SocketDir(Some(dir)),
        })
    }

    /// The bind mount that puts the socket into the container.
    pub fn mount(&self) -> Mount {
        Mount {
            host_path: self.dir.path().to_string_lossy().into_owned(),
            container_path: CONTAINER_DIR.into(),
            read_only: true,
        }
    }

    /// The socket's path inside the container.
    pub fn socket_path(&self) -> String {
        format!("{CONTAINER_DIR}/{SOCKET_NAME}")
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    /// The next connection that greets with the token. Callers bound it
    /// with their own deadline; connections without the token are dropped.
    pub async fn accept(self) -> Result<Channel> {
        loop {
            let (stream, _) = self
                .listener
                .accept()
                .await
                .map_err(|e| Error::io("accepting the code host's bridge", e))?;
            let (read, write) = stream.into_split();
            let mut reader = BufReader::new(read);
            let mut hello = Vec::new();
            let mut limited = (&mut reader).take(HELLO_LIMIT as u64);
            // A connection that says nothing must not hold the door shut.
            let read = tokio::time::timeout(HELLO_TIMEOUT, limited.read_until(b'\n', &mut hello));
            if !matches!(read.await, Ok(Ok(_))) || !greets_with(&hello, &self.token) {
                continue;
            }
            // Nobody else needs to connect: the socket and its directory go
            // now. One that cannot be removed is left to the next host's sweep.
            drop(self.listener);
            if let Err(e) = self.dir.close() {
                tracing::debug!(error = %e, "the code host's socket directory stays");
            }
            return Ok(Channel {
                reader,
                writer: write,
                buf: vec![0u8; READ_CHUNK].into_boxed_slice(),
            });
        }
    }
}

/// Socket directories whose owner died without removing them (a SIGKILL
/// runs no destructor): nobody listens on their socket any more. Only old
/// ones: a directory made a moment ago may not have its socket yet.
fn remove_abandoned(temp: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(temp) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(DIR_PREFIX) {
            continue;
        }
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > std::time::Duration::from_secs(60));
        let socket = entry.path().join(SOCKET_NAME);
        // Connecting to a Unix socket answers at once: refused or taken.
        if old && std::os::unix::net::UnixStream::connect(&socket).is_err() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn greets_with(line: &[u8], token: &str) -> bool {
    let Ok(hello) = serde_json::from_slice::<serde_json::Value>(line) else {
        return false;
    };
    hello["type"] == "hello" && hello["token"] == token
}

fn set_mode(path: &std::path::Path, mode: u32) -> Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| Error::io("setting up the code host's socket", e))
}

/// The connected bridge.
pub(crate) struct Channel {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    buf: Box<[u8]>,
}

impl Channel {
    pub async fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        self.writer.write_all(line).await?;
        self.writer.flush().await
    }

    /// The next bytes the bridge sent; empty once it closed its end.
    /// They stay in the channel's own buffer until the next read, so a
    /// message costs no allocation.
    pub async fn read(&mut self) -> std::io::Result<&[u8]> {
        let n = self.reader.read(&mut self.buf).await?;
        Ok(&self.buf[..n])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_token_opens_the_channel() {
        assert!(greets_with(br#"{"type":"hello","token":"abc"}"#, "abc"));
        assert!(!greets_with(br#"{"type":"hello","token":"abd"}"#, "abc"));
        assert!(!greets_with(br#"{"type":"ready","token":"abc"}"#, "abc"));
        assert!(!greets_with(b"garbage", "abc"));
    }

    #[test]
    fn abandoned_socket_directories_are_removed_and_live_ones_kept() {
        let temp = tempfile::tempdir().unwrap();
        let dead = temp.path().join(format!("{DIR_PREFIX}dead"));
        std::fs::create_dir(&dead).unwrap();
        drop(std::os::unix::net::UnixListener::bind(dead.join(SOCKET_NAME)).unwrap());
        let live = temp.path().join(format!("{DIR_PREFIX}live"));
        std::fs::create_dir(&live).unwrap();
        let _listening = std::os::unix::net::UnixListener::bind(live.join(SOCKET_NAME)).unwrap();
        let young = temp.path().join(format!("{DIR_PREFIX}young"));
        std::fs::create_dir(&young).unwrap();
        let hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        for dir in [&dead, &live] {
            std::fs::File::open(dir)
                .unwrap()
                .set_modified(hour_ago)
                .unwrap();
        }
        remove_abandoned(temp.path());
        assert!(!dead.exists());
        assert!(live.exists());
        assert!(
            young.exists(),
            "a directory made a moment ago may not have its socket yet"
        );
    }

    #[tokio::test]
    async fn a_connection_without_the_token_is_dropped_and_the_next_one_taken() {
        let offer = Offer::new().unwrap();
        let dir = offer.dir.path().to_path_buf();
        let path = dir.join(SOCKET_NAME);
        let token = offer.token().to_string();
        let accepting = tokio::spawn(offer.accept());
        let mut impostor = tokio::net::UnixStream::connect(&path).await.unwrap();
        impostor
            .write_all(b"{\"type\":\"hello\",\"token\":\"wrong\"}\n")
            .await
            .unwrap();
        let mut bridge = tokio::net::UnixStream::connect(&path).await.unwrap();
        let hello =
            format!("{{\"type\":\"hello\",\"token\":\"{token}\"}}\n{{\"type\":\"ready\"}}\n");
        bridge.write_all(hello.as_bytes()).await.unwrap();
        let mut channel = accepting.await.unwrap().unwrap();
        let mut got = Vec::new();
        while !got.ends_with(b"\n") {
            got.extend_from_slice(channel.read().await.unwrap());
        }
        assert_eq!(got, b"{\"type\":\"ready\"}\n");
        assert!(
            !dir.exists(),
            "the socket's directory outlived the connection"
        );
        // The impostor's connection was closed.
        let mut buf = [0u8; 1];
        assert_eq!(impostor.read(&mut buf).await.unwrap(), 0);
    }
}
