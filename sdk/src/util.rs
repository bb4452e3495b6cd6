//! Small helpers shared across modules.

use std::sync::{Mutex, MutexGuard};

/// Runs blocking file work on tokio's blocking pool; `what` names it in
/// the error if the work panicked.
pub(crate) async fn blocking<T: Send + 'static>(
    what: &'static str,
    work: impl FnOnce() -> crate::error::Result<T> + Send + 'static,
) -> crate::error::Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| crate::error::Error::io(what, std::io::Error::other(e)))?
}

/// Locks a mutex, recovering from poisoning: the data behind these locks are
/// caches and status records that a panic elsewhere does not make wrong.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Appends diagnostic text to `buf`, keeping only about the last `keep` bytes
/// once it grows past twice that (a dying process's last words matter most).
pub(crate) fn push_tail(buf: &mut String, bytes: &[u8], keep: usize) {
    buf.push_str(&String::from_utf8_lossy(bytes));
    if buf.len() > 2 * keep {
        let from = buf.len() - keep;
        let from = (from..buf.len())
            .find(|i| buf.is_char_boundary(*i))
            .unwrap_or(0);
        buf.drain(..from);
    }
}

/// An ASCII identifier: a letter or `_`, then letters, digits and `_` (what
/// Python variables and environment variables may be named).
pub(crate) fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The candidate closest to `name`, if one is close enough to be a typo of it.
pub(crate) fn closest<'a>(
    name: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(name, c), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// Copies a tree, keeping symbolic links as links.
pub(crate) fn copy_tree(from: &std::path::Path, to: &std::path::Path) -> crate::error::Result<()> {
    let wrap = |e| crate::error::Error::io(format!("copying {}", from.display()), e);
    std::fs::create_dir_all(to).map_err(wrap)?;
    for entry in std::fs::read_dir(from).map_err(wrap)? {
        let entry = entry.map_err(wrap)?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let meta = std::fs::symlink_metadata(&src).map_err(wrap)?;
        if meta.is_dir() {
            copy_tree(&src, &dst)?;
        } else if meta.file_type().is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src).map_err(wrap)?, &dst)
                .map_err(wrap)?;
        } else {
            std::fs::copy(&src, &dst).map_err(wrap)?;
        }
    }
    Ok(())
}

/// Splits a byte stream into lines; partial lines wait for the rest.
///
/// Each byte is looked at once: a long line arriving in many small chunks
/// (a file piece's reply) costs its length, not its length times the number
/// of chunks.
#[derive(Debug, Default)]
pub(crate) struct LineBuffer {
    pending: Vec<u8>,
}

impl LineBuffer {
    /// Adds bytes; returns the complete lines they finish (without newlines).
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut lines = Vec::new();
        let mut rest = bytes;
        while let Some(nl) = rest.iter().position(|&b| b == b'\n') {
            let mut line = std::mem::take(&mut self.pending);
            line.extend_from_slice(&rest[..nl]);
            if !line.is_empty() {
                lines.push(line);
            }
            rest = &rest[nl + 1..];
        }
        self.pending.extend_from_slice(rest);
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::{is_identifier, push_tail};

    #[test]
    fn identifiers() {
        for ok in ["x", "_a1", "API_KEY"] {
            assert!(is_identifier(ok), "{ok}");
        }
        for bad in ["", "1x", "a-b", "é", "a b"] {
            assert!(!is_identifier(bad), "{bad}");
        }
    }

    #[test]
    fn lines_split_across_chunks_come_whole() {
        let mut b = super::LineBuffer::default();
        assert!(b.push(b"ab").is_empty());
        assert_eq!(b.push(b"c\nd\n\ne"), vec![b"abc".to_vec(), b"d".to_vec()]);
        assert_eq!(b.push(b"f\n"), vec![b"ef".to_vec()]);
        // A long line in small chunks: each byte is looked at once.
        let long = vec![b'x'; 1 << 20];
        for chunk in long.chunks(1000) {
            assert!(b.push(chunk).is_empty());
        }
        assert_eq!(b.push(b"\n"), vec![long]);
    }

    #[test]
    fn tail_keeps_the_end_on_char_boundaries() {
        let mut buf = String::new();
        push_tail(&mut buf, "ééééé".as_bytes(), 3);
        push_tail(&mut buf, b"xyz", 3);
        assert!(buf.ends_with("xyz"));
        assert!(buf.len() <= 6, "{buf}");
    }
}
