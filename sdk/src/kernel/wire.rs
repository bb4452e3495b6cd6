//! What the host and the relay inside a kernel container say to each other
//! (`sdk/images/kernel/relay.py`): JSON lines; Jupyter messages travel whole,
//! built and read with `jupyter-protocol`'s types. Pure, tested without Docker.

use jupyter_protocol::{ExecuteRequest, JupyterMessage};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Language;

/// Host -> relay.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Op<'a> {
    /// Start (or restart) a context's kernel.
    Start {
        ctx: &'a str,
        language: &'a str,
        cwd: &'a str,
        text_limit: usize,
        payload_limit: usize,
        startup: &'a [String],
        /// Names bound to modules imported at first use.
        modules: std::collections::BTreeMap<&'a str, &'a str>,
        formats: &'a [String],
    },
    /// Send a message to a context's kernel.
    Send {
        ctx: &'a str,
        channel: &'a str,
        msg: Value,
    },
    /// SIGINT to a context's kernel.
    Interrupt { ctx: &'a str },
    /// End a context's kernel and all it started.
    Stop { ctx: &'a str },
    /// Asks for the running contexts (a host that takes over a relay).
    List,
}

impl Op<'_> {
    /// One line.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut line = serde_json::to_vec(self).unwrap_or_default();
        line.push(b'\n');
        line
    }
}

/// Relay -> host.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub(crate) enum Event {
    Ready,
    Started {
        ctx: String,
    },
    Failed {
        ctx: Option<String>,
        reason: String,
    },
    Msg {
        ctx: String,
        msg: Value,
    },
    Cut {
        ctx: String,
        parent: Option<String>,
        stream: String,
    },
    Died {
        ctx: String,
        code: i64,
        oom: bool,
        stderr: String,
    },
    Stopped {
        ctx: String,
    },
    /// The running contexts, in answer to `list`.
    Contexts {
        list: Vec<Listed>,
    },
}

/// A context a relay runs, as `list` gives it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub(crate) struct Listed {
    pub ctx: String,
    pub cwd: String,
    /// Python where a relay of an earlier version does not say.
    #[serde(default)]
    pub language: Language,
}

impl Event {
    /// The context the event is about.
    pub(crate) fn context(&self) -> Option<&str> {
        match self {
            Event::Ready | Event::Contexts { .. } => None,
            Event::Failed { ctx, .. } => ctx.as_deref(),
            Event::Started { ctx }
            | Event::Msg { ctx, .. }
            | Event::Cut { ctx, .. }
            | Event::Died { ctx, .. }
            | Event::Stopped { ctx } => Some(ctx),
        }
    }

    /// The request a message or cut answers, if it is either.
    pub(crate) fn parent(&self) -> Option<Option<&str>> {
        match self {
            Event::Msg { msg, .. } => Some(msg["parent_header"]["msg_id"].as_str()),
            Event::Cut { parent, .. } => Some(parent.as_deref()),
            _ => None,
        }
    }
}

/// An `execute_request` and its message id.
pub(crate) fn execute_request(code: &str) -> (String, Value) {
    let request = ExecuteRequest {
        code: code.to_string(),
        silent: false,
        store_history: true,
        user_expressions: None,
        // `input()` has no one to answer it: it raises at once.
        allow_stdin: false,
        // Each run stands alone: a failed (or interrupted) one must not
        // abort the runs queued behind it.
        stop_on_error: false,
    };
    let mut message = JupyterMessage::new(request, None);
    message.header.username = "dockhand".into();
    let id = message.header.msg_id.clone();
    (id, serde_json::to_value(&message).unwrap_or(Value::Null))
}

/// Splits the relay's output into lines. Linear however the bytes arrive;
/// a line longer than `limit` is dropped whole (the relay caps what it
/// sends, so only a broken relay gets there).
pub(crate) struct Lines {
    pending: Vec<u8>,
    scanned: usize,
    skipping: bool,
    limit: usize,
}

impl Lines {
    pub(crate) fn new(limit: usize) -> Self {
        Lines {
            pending: Vec::new(),
            scanned: 0,
            skipping: false,
            limit,
        }
    }

    /// Adds bytes; returns the lines they complete.
    pub(crate) fn push(&mut self, mut bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut lines = Vec::new();
        while !bytes.is_empty() {
            if self.skipping {
                match bytes.iter().position(|&b| b == b'\n') {
                    Some(nl) => {
                        self.skipping = false;
                        bytes = &bytes[nl + 1..];
                    }
                    None => return lines,
                }
                continue;
            }
            self.pending.extend_from_slice(bytes);
            bytes = &[];
            while let Some(nl) = self.pending[self.scanned..]
                .iter()
                .position(|&b| b == b'\n')
            {
                let end = self.scanned + nl;
                let line: Vec<u8> = self.pending[..end].to_vec();
                self.pending.drain(..=end);
                self.scanned = 0;
                if !line.is_empty() {
                    lines.push(line);
                }
            }
            self.scanned = self.pending.len();
            if self.pending.len() > self.limit {
                tracing::warn!(
                    bytes = self.pending.len(),
                    "over-long line from the kernel relay dropped"
                );
                self.pending = Vec::new();
                self.scanned = 0;
                self.skipping = true;
            }
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_across_chunks_and_long_ones_are_dropped() {
        let mut lines = Lines::new(10);
        assert!(lines.push(b"{\"a\"").is_empty());
        assert_eq!(lines.push(b":1}\nxy"), vec![b"{\"a\":1}".to_vec()]);
        assert!(lines.push(b"0123456789abc").is_empty());
        assert!(lines.push(b"still the long one").is_empty());
        assert_eq!(lines.push(b"\nok\n"), vec![b"ok".to_vec()]);
    }

    #[test]
    fn execute_requests_are_jupyter_messages_with_fresh_ids() {
        let (id, msg) = execute_request("1 + 1");
        let (other, _) = execute_request("1 + 1");
        assert_ne!(id, other);
        assert_eq!(msg["header"]["msg_id"], id.as_str());
        assert_eq!(msg["header"]["msg_type"], "execute_request");
        assert_eq!(msg["content"]["code"], "1 + 1");
        assert_eq!(msg["content"]["allow_stdin"], false);
    }

    #[test]
    fn events_name_their_context_and_parent() {
        let e: Event = serde_json::from_str(
            r#"{"ev":"msg","ctx":"a","channel":"iopub","msg":{"parent_header":{"msg_id":"m1"}}}"#,
        )
        .unwrap();
        assert_eq!(e.context(), Some("a"));
        assert_eq!(e.parent(), Some(Some("m1")));
        let line = Op::Interrupt { ctx: "a" }.encode();
        assert_eq!(line, b"{\"op\":\"interrupt\",\"ctx\":\"a\"}\n");
    }
}
