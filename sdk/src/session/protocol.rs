//! The protocol between the host and the session agent
//! (`sdk/images/agent`): JSON lines, binary data base64-encoded.
//! Pure: message types and codecs, tested without Docker.

use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// Host -> agent.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    /// Run a shell command.
    Exec {
        /// Request id.
        id: u64,
        /// The command, run by `/bin/sh -c`.
        command: String,
        /// Working directory (workspace-relative or absolute).
        #[serde(skip_serializing_if = "Option::is_none")]
        cwd: Option<String>,
        /// Extra environment.
        env: std::collections::BTreeMap<String, String>,
        /// Standard input, base64.
        #[serde(skip_serializing_if = "Option::is_none")]
        stdin: Option<String>,
        /// Seconds before the process group is killed.
        #[serde(skip_serializing_if = "Option::is_none")]
        timeout_s: Option<f64>,
        /// Bytes of each stream kept.
        output_limit: usize,
        /// Send output chunks as they come.
        stream: bool,
        /// Keep stdin open for [`Request::Input`]s (a long-lived helper).
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        keep_stdin: bool,
        /// Answer [`Reply::Started`] with the command's pid first.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        report_pid: bool,
        /// Run it on a terminal of this size (its output comes as stdout).
        #[serde(skip_serializing_if = "Option::is_none")]
        pty: Option<TerminalSize>,
    },
    /// A new size for a running exec's terminal.
    Resize {
        /// The exec's request id.
        id: u64,
        /// Rows.
        rows: u16,
        /// Columns.
        cols: u16,
    },
    /// A signal for a running exec's process group (ignored once it ended).
    Signal {
        /// The exec's request id.
        id: u64,
        /// The signal's number (`SIGKILL`, `SIGTERM`, `SIGINT` or `SIGHUP`).
        signal: i32,
    },
    /// List the running commands that keep their stdin open (channels).
    Channels {
        /// Request id.
        id: u64,
    },
    /// Describe one path (symbolic links not followed).
    Stat {
        /// Request id.
        id: u64,
        /// Path.
        path: String,
    },
    /// Make a directory and its parents.
    Mkdir {
        /// Request id.
        id: u64,
        /// Path.
        path: String,
    },
    /// Rename a file or directory (the destination's parents are made).
    Move {
        /// Request id.
        id: u64,
        /// Path.
        path: String,
        /// Where it goes.
        destination: String,
    },
    /// Bytes for the stdin of an exec that keeps it open, in order.
    Input {
        /// The exec's request id.
        id: u64,
        /// Bytes, base64.
        data: String,
        /// Close stdin after these bytes.
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        close: bool,
    },
    /// Read a file; with `length`, only the piece of at most that many
    /// bytes at `offset` (a streamed read), answered with the file's size.
    Read {
        /// Request id.
        id: u64,
        /// Path.
        path: String,
        /// The largest file to return (or to read in pieces).
        max_bytes: u64,
        /// Where the piece starts.
        #[serde(skip_serializing_if = "Option::is_none")]
        offset: Option<u64>,
        /// The most the piece holds (the agent may hold it to less).
        #[serde(skip_serializing_if = "Option::is_none")]
        length: Option<u64>,
    },
    /// Write a file atomically (parents created); with `offset`, write
    /// the bytes at that place in the file instead, making it if need be (a
    /// streamed upload's pieces, which may arrive in any order).
    Write {
        /// Request id.
        id: u64,
        /// Path.
        path: String,
        /// Content, base64.
        data: String,
        /// Where in the file the bytes go.
        #[serde(skip_serializing_if = "Option::is_none")]
        offset: Option<u64>,
    },
    /// List a directory.
    List {
        /// Request id.
        id: u64,
        /// Path.
        path: String,
    },
    /// Open a TCP connection to a port on the container's loopback; its
    /// bytes come as [`Reply::Chunk`]s after [`Reply::Connected`], then
    /// [`Reply::Ok`] when it closed. The host's bytes go as
    /// [`Request::Input`]s, each acked with [`Reply::Ack`].
    Connect {
        /// Request id.
        id: u64,
        /// The port.
        port: u16,
    },
    /// The host wrote out `bytes` of a connection's chunks: the agent may
    /// send that many more.
    Ack {
        /// The connection's request id.
        id: u64,
        /// Bytes written out.
        bytes: u64,
    },
    /// Watch a directory (and, `recursive`, what it holds) for changes:
    /// [`Reply::Watching`], then [`Reply::Events`] until a
    /// [`Request::Hangup`] ends it with [`Reply::Ok`].
    Watch {
        /// Request id.
        id: u64,
        /// The directory.
        path: String,
        /// Follow its subdirectories too.
        recursive: bool,
    },
    /// Cut a connection, or end a watch.
    Hangup {
        /// The connection's request id.
        id: u64,
    },
    /// Remove a file or directory.
    Remove {
        /// Request id.
        id: u64,
        /// Path.
        path: String,
        /// Remove directories with their contents.
        recursive: bool,
    },
}

/// One directory entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DirEntry {
    /// File name.
    pub name: String,
    /// `file`, `dir`, `link` or `other`.
    pub kind: String,
    /// Size in bytes.
    pub size: u64,
    /// Last modification, nanoseconds since the Unix epoch.
    #[serde(default)]
    pub mtime_ns: u64,
}

/// One change a watch saw, as the agent says it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct WatchedChange {
    /// The path, relative to the watched directory.
    pub name: String,
    /// `create`, `write`, `remove`, `rename`, `chmod` or `overflow`.
    pub kind: String,
}

/// A terminal's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalSize {
    /// Rows.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

/// What `stat`, `mkdir` and `move` say about a path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct FileInfo {
    /// The last component of the path.
    pub name: String,
    /// The path, absolute, with symbolic links of its parents resolved.
    pub path: String,
    /// `file`, `dir`, `link` or `other`.
    pub kind: String,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits (`0o644`).
    pub mode: u32,
    /// Owner's uid.
    pub uid: u32,
    /// Group's gid.
    pub gid: u32,
    /// Last modification, seconds since the Unix epoch.
    pub mtime: f64,
    /// Where a symbolic link points.
    #[serde(default)]
    pub target: Option<String>,
}

/// A running command a host talks to over its stdin, as the agent
/// started it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct OpenChannel {
    /// Its request id.
    pub id: u64,
    /// Its command.
    pub command: String,
}

/// Agent -> host.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    /// The agent is up.
    Ready {
        /// Its pid.
        pid: u32,
        /// One past the highest request id it has seen (said in answer
        /// to a `hello`): where a later host starts numbering.
        #[serde(default)]
        next_id: u64,
    },
    /// An exec with `report_pid` began: its pid (and process group).
    Started {
        /// Request id.
        id: u64,
        /// The command's pid in the container.
        pid: u32,
    },
    /// A `connect` reached its port.
    Connected {
        /// Request id.
        id: u64,
    },
    /// A `watch` is in place: later changes are reported.
    Watching {
        /// Request id.
        id: u64,
    },
    /// Changes a watch saw, in order.
    Events {
        /// Request id.
        id: u64,
        /// What changed.
        events: Vec<WatchedChange>,
    },
    /// The agent wrote out `bytes` of a connection's input.
    Ack {
        /// The connection's request id.
        id: u64,
        /// Bytes written.
        bytes: u64,
    },
    /// Output of a streaming exec (or a connection's bytes).
    Chunk {
        /// Request id.
        id: u64,
        /// `stdout` or `stderr`.
        stream: String,
        /// Bytes, base64.
        data: String,
    },
    /// A command ended.
    Exit {
        /// Request id.
        id: u64,
        /// Exit code (negative: killed by that signal).
        code: i64,
        /// Whether it was killed for its timeout.
        timed_out: bool,
        /// Kept stdout, base64.
        stdout: String,
        /// Kept stderr, base64.
        stderr: String,
        /// Whether stdout was cut.
        stdout_truncated: bool,
        /// Whether stderr was cut.
        stderr_truncated: bool,
        /// Whether it was killed for using up the session's pids.
        #[serde(default)]
        pids_exhausted: bool,
    },
    /// A file request succeeded.
    Ok {
        /// Request id.
        id: u64,
        /// File content (read), base64.
        #[serde(default)]
        data: Option<String>,
        /// The file's size when a piece of it was read (an agent that
        /// reads no pieces leaves it out and sends the whole file).
        #[serde(default)]
        size: Option<u64>,
        /// Entries (list).
        #[serde(default)]
        entries: Option<Vec<DirEntry>>,
        /// The path's description (stat, mkdir, move).
        #[serde(default)]
        entry: Option<FileInfo>,
        /// Whether mkdir made the directory (false: it was there).
        #[serde(default)]
        created: Option<bool>,
        /// The channels (channels).
        #[serde(default)]
        channels: Option<Vec<OpenChannel>>,
    },
    /// A request failed.
    Error {
        /// Request id.
        id: u64,
        /// `not_found`, `not_a_directory`, `is_a_directory`, `outside`, `permission`, `read_only`, `not_empty`, `io`, `protocol`.
        kind: String,
        /// What happened.
        message: String,
    },
}

impl Reply {
    /// The request this reply answers (none for `ready`).
    pub fn id(&self) -> Option<u64> {
        match self {
            Reply::Ready { .. } => None,
            Reply::Chunk { id, .. }
            | Reply::Started { id, .. }
            | Reply::Connected { id }
            | Reply::Watching { id }
            | Reply::Events { id, .. }
            | Reply::Ack { id, .. }
            | Reply::Exit { id, .. }
            | Reply::Ok { id, .. }
            | Reply::Error { id, .. } => Some(*id),
        }
    }

    /// Whether this reply ends its request.
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            Reply::Exit { .. } | Reply::Ok { .. } | Reply::Error { .. }
        )
    }
}

/// Encodes bytes for the wire.
pub fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// Decodes bytes from the wire.
pub fn unb64(text: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| format!("bad base64 from the session agent: {e}"))
}

/// One request as a line of JSON.
pub fn encode(request: &Request) -> Vec<u8> {
    let mut line = serde_json::to_vec(request).unwrap_or_default();
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_tagged_json_lines() {
        let line = encode(&Request::Write {
            id: 3,
            path: "a/b".into(),
            data: b64(b"\x00\xffhi"),
            offset: None,
        });
        assert!(line.ends_with(b"\n"));
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["type"], "write");
        assert_eq!(unb64(v["data"].as_str().unwrap()).unwrap(), b"\x00\xffhi");
        let exec = encode(&Request::Exec {
            id: 1,
            command: "ls".into(),
            cwd: None,
            env: Default::default(),
            stdin: None,
            timeout_s: Some(2.0),
            output_limit: 10,
            stream: false,
            keep_stdin: false,
            report_pid: false,
            pty: None,
        });
        let v: serde_json::Value = serde_json::from_slice(&exec).unwrap();
        assert!(v.get("cwd").is_none() && v.get("stdin").is_none());
        assert!(v.get("report_pid").is_none());
        assert_eq!(v["timeout_s"], 2.0);
        let signal = encode(&Request::Signal { id: 4, signal: 9 });
        let v: serde_json::Value = serde_json::from_slice(&signal).unwrap();
        assert_eq!(
            (v["type"].as_str(), v["signal"].as_i64()),
            (Some("signal"), Some(9))
        );
    }

    #[test]
    fn replies_decode_and_know_their_request() {
        let r: Reply = serde_json::from_str(r#"{"type":"exit","id":7,"code":0,"timed_out":false,"stdout":"aGk=","stderr":"","stdout_truncated":false,"stderr_truncated":false}"#).unwrap();
        assert_eq!(r.id(), Some(7));
        assert!(r.is_final());
        let r: Reply =
            serde_json::from_str(r#"{"type":"chunk","id":7,"stream":"stdout","data":"aGk="}"#)
                .unwrap();
        assert!(!r.is_final());
        let r: Reply = serde_json::from_str(
            r#"{"type":"ok","id":2,"entries":[{"name":"a","kind":"file","size":1}]}"#,
        )
        .unwrap();
        assert!(matches!(r, Reply::Ok { entries: Some(ref e), .. } if e[0].name == "a"));
        let r: Reply = serde_json::from_str(r#"{"type":"started","id":9,"pid":42}"#).unwrap();
        assert_eq!((r.id(), r.is_final()), (Some(9), false));
        let r: Reply = serde_json::from_str(
            r#"{"type":"ok","id":3,"created":true,"entry":{"name":"d","path":"/tmp/d","kind":"dir","size":4096,"mode":493,"uid":0,"gid":0,"mtime":1.5}}"#,
        )
        .unwrap();
        assert!(
            matches!(r, Reply::Ok { entry: Some(ref e), created: Some(true), .. } if e.kind == "dir" && e.mode == 0o755)
        );
        let r: Reply = serde_json::from_str(r#"{"type":"ready","pid":1}"#).unwrap();
        assert_eq!(r.id(), None);
        assert!(unb64("!!").is_err());
    }
}
