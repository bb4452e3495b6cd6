//! One process at a time holds a kept session: a lock on a file of the
//! client's cache directory named by its container, taken when a kept
//! session is started or adopted and released when its handle goes (or its
//! process dies: the kernel drops the lock). A second client, in this
//! process or another of the machine, that asks for a kept session held
//! elsewhere is refused, typed, rather than mixing its requests with the
//! holder's on one agent.

use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::error::{Error, Result};

/// A held kept session (its lock is released when this drops).
pub(crate) struct Hold {
    _file: std::fs::File,
}

/// Holds the kept session of container `id`, or says who holds it.
pub(crate) fn hold_kept(cache_dir: &Path, id: &str) -> Result<Hold> {
    let dir = cache_dir.join("kept-sessions");
    let wrap = |e| Error::io(format!("holding kept session {id}"), e);
    std::fs::create_dir_all(&dir).map_err(wrap)?;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.join(id))
        .map_err(wrap)?;
    // SAFETY: flock(2) on a descriptor this function owns; no memory is
    // passed.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    if !locked {
        let mut holder = String::new();
        let _ = file.read_to_string(&mut holder);
        return Err(Error::SessionUnavailable {
            reason: format!(
                "kept session {id} is held by a live client (process {}): one process at a time; close it there, or end that process",
                holder.trim()
            ),
        });
    }
    let _ = file.set_len(0);
    let _ = file.rewind();
    let _ = write!(file, "{}", std::process::id());
    Ok(Hold { _file: file })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_second_holder_is_refused_until_the_first_lets_go() {
        let dir = std::env::temp_dir().join(format!("dh-test-hold-{}", std::process::id()));
        let first = super::hold_kept(&dir, "c0ffee").unwrap();
        match super::hold_kept(&dir, "c0ffee") {
            Err(crate::Error::SessionUnavailable { reason }) => {
                assert!(reason.contains(&std::process::id().to_string()), "{reason}")
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
        assert!(super::hold_kept(&dir, "another").is_ok());
        drop(first);
        assert!(super::hold_kept(&dir, "c0ffee").is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
