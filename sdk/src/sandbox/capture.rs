//! Capturing a container's output: capped buffers and live line callbacks.

use std::sync::Arc;

/// Which stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// One line of live output (without its newline).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutputLine {
    /// Where it came from.
    pub stream: StreamKind,
    /// The text (invalid UTF-8 replaced).
    pub line: String,
}

/// Receives output lines while a run goes.
pub type OutputHandler = Arc<dyn Fn(OutputLine) + Send + Sync>;

/// Captured text of one stream, capped.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CapturedText {
    /// The first `limit` bytes (invalid UTF-8 replaced).
    pub text: String,
    /// Whether output was cut at the limit.
    pub truncated: bool,
    /// Total bytes the program wrote.
    pub total_bytes: usize,
}

/// Accumulates one stream: capped bytes plus line splitting for the callback.
#[derive(Debug)]
pub(crate) struct StreamBuffer {
    kind: StreamKind,
    limit: usize,
    kept: Vec<u8>,
    total: usize,
    partial: Vec<u8>,
}

impl StreamBuffer {
    pub(crate) fn new(kind: StreamKind, limit: usize) -> Self {
        StreamBuffer {
            kind,
            limit,
            kept: Vec::new(),
            total: 0,
            partial: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, bytes: &[u8], handler: Option<&OutputHandler>) {
        self.total += bytes.len();
        let room = self.limit.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
        if let Some(handler) = handler {
            self.partial.extend_from_slice(bytes);
            while let Some(nl) = self.partial.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.partial.drain(..=nl).collect();
                let text = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
                handler(OutputLine {
                    stream: self.kind,
                    line: text,
                });
            }
        }
    }

    /// Flushes a last line without newline to the handler and returns the capture.
    pub(crate) fn finish(mut self, handler: Option<&OutputHandler>) -> CapturedText {
        if let Some(handler) = handler {
            if !self.partial.is_empty() {
                let text = String::from_utf8_lossy(&self.partial).into_owned();
                self.partial.clear();
                handler(OutputLine {
                    stream: self.kind,
                    line: text,
                });
            }
        }
        CapturedText {
            text: String::from_utf8_lossy(&self.kept).into_owned(),
            truncated: self.total > self.kept.len(),
            total_bytes: self.total,
        }
    }
}

/// The last `max` bytes of `text`, on a character boundary.
pub(crate) fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn caps_and_flags_truncation() {
        let mut b = StreamBuffer::new(StreamKind::Stdout, 5);
        b.push(b"abc", None);
        b.push(b"defgh", None);
        let c = b.finish(None);
        assert_eq!(
            (c.text.as_str(), c.truncated, c.total_bytes),
            ("abcde", true, 8)
        );
    }

    #[test]
    fn lines_are_split_across_chunks() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let handler: OutputHandler = Arc::new(move |l: OutputLine| s2.lock().unwrap().push(l.line));
        let mut b = StreamBuffer::new(StreamKind::Stderr, 100);
        b.push(b"one\ntw", Some(&handler));
        b.push(b"o\nthree", Some(&handler));
        let c = b.finish(Some(&handler));
        assert_eq!(*seen.lock().unwrap(), ["one", "two", "three"]);
        assert!(!c.truncated);
    }

    #[test]
    fn tail_respects_char_boundaries() {
        assert_eq!(tail("héllo", 4), "llo");
        assert_eq!(tail("abc", 10), "abc");
    }
}
