//! Directory watching by inotify: a file made and removed at once is seen,
//! as a listing every so often never could.
//!
//! `watch {id, path, recursive}` answers `watching` once the watch is in
//! place (what happens after that is reported), then `events` lines (each a
//! batch of `{name, kind}`, names relative to the watched directory; kinds
//! `create`, `write`, `remove`, `rename`, `chmod`, and `overflow` when the
//! kernel dropped events), until `hangup` ends it with `ok`. A directory made
//! inside a recursive watch is watched too, and what it already holds by
//! then is reported as made.

use std::collections::HashMap;
use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::agent;
use crate::paths::{name_text, resolve};
use crate::reply::{send, Refused};
use crate::sys::readable;

/// Directories one watch follows, at most (each is an inotify watch).
const MAX_DIRECTORIES: usize = 8192;
/// Levels a recursive watch descends, at most.
const MAX_DEPTH: usize = 32;
/// Events sent in one line, at most.
const MAX_BATCH: usize = 1000;
/// How often a quiet watch checks whether it was hung up.
const TICK: Duration = Duration::from_millis(200);

const MASK: u32 = libc::IN_CREATE
    | libc::IN_MODIFY
    | libc::IN_DELETE
    | libc::IN_MOVED_FROM
    | libc::IN_MOVED_TO
    | libc::IN_ATTRIB
    | libc::IN_DELETE_SELF
    | libc::IN_ONLYDIR
    | libc::IN_EXCL_UNLINK;

/// One inotify instance and the directories it watches.
struct Watch {
    fd: OwnedFd,
    root: PathBuf,
    recursive: bool,
    /// Watch descriptor -> the directory, relative to the root ("" for it).
    dirs: HashMap<i32, String>,
    /// Events waiting to be sent.
    pending: Vec<Value>,
    /// The rename cookie of the agent's own temporary file last moved
    /// away: where it lands, a file was written.
    temp_moved: Option<u32>,
}

/// The agent writes a file whole into `.<name>.dockhand-<hex>` beside it,
/// then renames it: the watcher sees the file made and written, not that.
fn is_agent_temp(name: &str) -> bool {
    let base = name.rsplit('/').next().unwrap_or(name);
    base.starts_with('.') && base.contains(".dockhand-")
}

impl Watch {
    fn add(&mut self, rel: &str) -> std::io::Result<()> {
        if self.dirs.len() >= MAX_DIRECTORIES {
            return Err(std::io::Error::other(format!(
                "a watch follows at most {MAX_DIRECTORIES} directories"
            )));
        }
        let path = if rel.is_empty() {
            self.root.clone()
        } else {
            self.root.join(rel)
        };
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::other("a path with a NUL byte"))?;
        // SAFETY: a valid descriptor and a NUL-terminated path.
        let wd = unsafe { libc::inotify_add_watch(self.fd.as_raw_fd(), c.as_ptr(), MASK) };
        if wd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        self.dirs.insert(wd, rel.to_string());
        Ok(())
    }

    /// Watches `rel` and, recursively, what it holds; with `report`, says
    /// each entry found was made (it was, since the parent's event).
    fn add_tree(&mut self, rel: &str, depth: usize, report: bool) {
        if self.add(rel).is_err() || depth >= MAX_DEPTH {
            return;
        }
        let Ok(entries) = std::fs::read_dir(self.root.join(rel)) else {
            return;
        };
        for entry in entries.flatten() {
            let name = join(rel, &name_text(&entry.file_name()));
            if report {
                self.event(&name, "create");
            }
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            if is_dir && self.recursive {
                self.add_tree(&name, depth + 1, report);
            }
        }
    }

    fn event(&mut self, name: &str, kind: &str) {
        // A burst of writes to one file is one event per batch.
        let last = self.pending.last();
        if last.is_some_and(|e| e["name"] == name && e["kind"] == kind) {
            return;
        }
        self.pending.push(json!({"name": name, "kind": kind}));
    }

    /// Reads what the kernel has and turns it into events.
    fn read(&mut self) -> std::io::Result<()> {
        let mut buffer = [0u8; 64 << 10];
        loop {
            // SAFETY: reads into a buffer of the length given.
            let n = unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    buffer.as_mut_ptr().cast(),
                    buffer.len(),
                )
            };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                return match e.kind() {
                    std::io::ErrorKind::WouldBlock => Ok(()),
                    std::io::ErrorKind::Interrupted => continue,
                    _ => Err(e),
                };
            }
            let mut at = 0usize;
            let head = std::mem::size_of::<libc::inotify_event>();
            while at + head <= n as usize {
                // SAFETY: the kernel wrote a whole event here; read unaligned.
                let raw: libc::inotify_event =
                    unsafe { std::ptr::read_unaligned(buffer[at..].as_ptr().cast()) };
                let name_bytes = &buffer[at + head..at + head + raw.len as usize];
                let name_end = name_bytes
                    .iter()
                    .position(|b| *b == 0)
                    .unwrap_or(name_bytes.len());
                let name = name_text(std::ffi::OsStr::from_bytes(&name_bytes[..name_end]));
                at += head + raw.len as usize;
                self.one(raw.wd, raw.mask, raw.cookie, &name);
            }
        }
    }

    fn one(&mut self, wd: i32, mask: u32, cookie: u32, name: &str) {
        if mask & libc::IN_Q_OVERFLOW != 0 {
            self.pending.push(json!({"name": "", "kind": "overflow"}));
            return;
        }
        if mask & libc::IN_IGNORED != 0 {
            self.dirs.remove(&wd);
            return;
        }
        let Some(dir) = self.dirs.get(&wd).cloned() else {
            return;
        };
        if mask & libc::IN_DELETE_SELF != 0 {
            // Its parent says so (or it was the root: `gone` below).
            return;
        }
        let rel = join(&dir, name);
        if is_agent_temp(name) {
            if mask & libc::IN_MOVED_FROM != 0 {
                self.temp_moved = Some(cookie);
            }
            return;
        }
        if mask & libc::IN_MOVED_TO != 0 && self.temp_moved == Some(cookie) {
            self.temp_moved = None;
            self.event(&rel, "create");
            self.event(&rel, "write");
            return;
        }
        let is_dir = mask & libc::IN_ISDIR != 0;
        if mask & (libc::IN_CREATE | libc::IN_MOVED_TO) != 0 {
            self.event(&rel, "create");
            if is_dir && self.recursive {
                self.add_tree(&rel, rel.matches('/').count() + 1, true);
            }
        } else if mask & libc::IN_MODIFY != 0 {
            self.event(&rel, "write");
        } else if mask & libc::IN_DELETE != 0 {
            self.event(&rel, "remove");
        } else if mask & libc::IN_MOVED_FROM != 0 {
            self.event(&rel, "rename");
        } else if mask & libc::IN_ATTRIB != 0 {
            self.event(&rel, "chmod");
        }
    }

    fn flush(&mut self, rid: u64) {
        for batch in self.pending.chunks(MAX_BATCH) {
            send(&json!({"type": "events", "id": rid, "events": batch}));
        }
        self.pending.clear();
    }
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// Watches until hung up (or the directory goes); the reply that ends the
/// request is the caller's.
pub fn watch(req: &Value) -> Result<(), Refused> {
    let rid = req
        .get("id")
        .and_then(Value::as_u64)
        .ok_or_else(|| Refused::missing("id"))?;
    let asked = req
        .get("path")
        .and_then(Value::as_str)
        .ok_or_else(|| Refused::missing("path"))?;
    let root = resolve(asked)?;
    let meta = std::fs::metadata(&root).map_err(|e| Refused::os(asked, &e))?;
    if !meta.is_dir() {
        return Err(Refused::new(
            "not_a_directory",
            format!("{asked} is not a directory"),
        ));
    }
    // SAFETY: returns a new descriptor or -1.
    let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EMFILE) {
            // Counted per user on the whole host, and sessions share a uid.
            return Err(Refused::new(
                "io",
                "no inotify instance left for the session's user on this host \
                 (raise the host's fs.inotify.max_user_instances, 128 by default)",
            ));
        }
        return Err(Refused::os(asked, &e));
    }
    let mut watch = Watch {
        // SAFETY: a descriptor this process just made.
        fd: unsafe { OwnedFd::from_raw_fd(fd) },
        root,
        recursive: req.get("recursive").and_then(Value::as_bool) == Some(true),
        dirs: HashMap::new(),
        pending: Vec::new(),
        temp_moved: None,
    };
    watch.add("").map_err(|e| Refused::os(asked, &e))?;
    if watch.recursive {
        if let Ok(entries) = std::fs::read_dir(&watch.root) {
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    let name = name_text(&entry.file_name());
                    watch.add_tree(&name, 1, false);
                }
            }
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    agent().lock_watches().insert(rid, stop.clone());
    send(&json!({"type": "watching", "id": rid}));
    let ended = loop {
        if stop.load(Ordering::SeqCst) {
            break Ok(());
        }
        if !readable(&watch.fd, TICK) {
            continue;
        }
        if let Err(e) = watch.read() {
            break Err(Refused::os(asked, &e));
        }
        let root_gone = !watch.dirs.values().any(String::is_empty);
        watch.flush(rid);
        if root_gone {
            break Err(Refused::new(
                "not_found",
                format!("{asked} was removed or moved"),
            ));
        }
    };
    agent().lock_watches().remove(&rid);
    ended
}

/// Ends a watch (on the reading loop); it answers `ok` within a tick.
pub fn stop(rid: u64) {
    if let Some(stop) = agent().lock_watches().get(&rid) {
        stop.store(true, Ordering::SeqCst);
    }
}
