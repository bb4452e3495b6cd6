//! Replies to the host: JSON lines on stdout, one writer at a time.

use std::io;
use std::sync::Mutex;

use base64::Engine as _;
use serde_json::{json, Value};

use crate::sys::{strerror, write_all};

static OUT: Mutex<()> = Mutex::new(());

/// Sends one message as a line; a host that went away is the agent's end,
/// which the closed stdin tells the reading loop.
pub fn send(message: &Value) {
    let mut line = serde_json::to_vec(message).unwrap_or_default();
    line.push(b'\n');
    let _one = OUT.lock().unwrap_or_else(|e| e.into_inner());
    let _ = write_all(1, &line);
}

/// Bytes as the wire carries them.
pub fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// Bytes from the wire.
pub fn unb64(text: &str) -> Result<Vec<u8>, Refused> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| Refused::new("protocol", format!("bad base64: {e}")))
}

/// A request refused, with the kind the host maps to an error.
#[derive(Debug)]
pub struct Refused {
    pub kind: &'static str,
    pub message: String,
}

impl Refused {
    pub fn new(kind: &'static str, message: impl Into<String>) -> Self {
        Refused {
            kind,
            message: message.into(),
        }
    }

    /// An OS error on `path`, with the kind the host knows it by.
    pub fn os(path: &str, e: &io::Error) -> Self {
        let kind = match e.raw_os_error() {
            Some(libc::ENOENT) => "not_found",
            Some(libc::ENOTDIR) => "not_a_directory",
            Some(libc::EISDIR) => "is_a_directory",
            Some(libc::EACCES) => "permission",
            Some(libc::EROFS) => "read_only",
            Some(libc::ENOTEMPTY) => "not_empty",
            Some(libc::EAGAIN) => "pids",
            _ => "io",
        };
        Refused::new(kind, format!("{path}: {}", strerror(e)))
    }

    /// A field the request must carry.
    pub fn missing(field: &str) -> Self {
        Refused::new("protocol", format!("the request has no `{field}`"))
    }

    pub fn send(&self, id: &Value) {
        send(&json!({"type": "error", "id": id, "kind": self.kind, "message": self.message}));
    }
}
