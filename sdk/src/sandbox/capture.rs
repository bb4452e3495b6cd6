//! Capturing a container's output: capped buffers and live line callbacks.

use std::sync::Arc;

use crate::settings::{lookahead, redact, redact_cut, Cut};

/// Which stream a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// One line of live output (without its newline), or a piece of one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutputLine {
    /// Where it came from.
    pub stream: StreamKind,
    /// The text (invalid UTF-8 replaced; secret values redacted).
    pub line: String,
    /// The line goes on in the next `OutputLine` of the same stream: a line
    /// longer than [`LINE_PIECE`] bytes comes in pieces of that size (give
    /// or take a redaction marker), so a program that never writes a
    /// newline cannot make the host hold it.
    pub partial: bool,
}

/// Receives output lines while a run goes.
pub type OutputHandler = Arc<dyn Fn(OutputLine) + Send + Sync>;

/// The longest piece of a line handed to an [`OutputHandler`] at once.
pub const LINE_PIECE: usize = 64 * 1024;

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

/// Accumulates one stream: capped bytes plus line splitting for the
/// callback, secret values redacted in both. Work and memory are linear in
/// what arrives and bounded by the cap and [`LINE_PIECE`].
#[derive(Debug)]
pub(crate) struct StreamBuffer {
    kind: StreamKind,
    limit: usize,
    /// The first `limit` bytes and as many more as the longest secret
    /// needs, so a value that starts before the cap is redacted whole.
    kept: Vec<u8>,
    keep: usize,
    total: usize,
    /// The current line so far (less than [`LINE_PIECE`] bytes).
    partial: Vec<u8>,
    /// The current line began in an earlier piece.
    continued: bool,
    secrets: Arc<[(String, String)]>,
}

impl StreamBuffer {
    pub(crate) fn new(kind: StreamKind, limit: usize, secrets: Arc<[(String, String)]>) -> Self {
        StreamBuffer {
            kind,
            limit,
            kept: Vec::new(),
            keep: limit.saturating_add(lookahead(&secrets)),
            total: 0,
            partial: Vec::new(),
            continued: false,
            secrets,
        }
    }

    pub(crate) fn push(&mut self, bytes: &[u8], handler: Option<&OutputHandler>) {
        self.total += bytes.len();
        let room = self.keep.saturating_sub(self.kept.len());
        self.kept.extend_from_slice(&bytes[..bytes.len().min(room)]);
        let Some(handler) = handler else { return };
        let mut rest = bytes;
        while !rest.is_empty() {
            let room = LINE_PIECE - self.partial.len();
            let window = &rest[..rest.len().min(room)];
            match window.iter().position(|&b| b == b'\n') {
                Some(nl) => {
                    self.partial.extend_from_slice(&window[..nl]);
                    self.emit(handler, false);
                    rest = &rest[nl + 1..];
                }
                None => {
                    self.partial.extend_from_slice(window);
                    rest = &rest[window.len()..];
                    if self.partial.len() == LINE_PIECE {
                        self.emit(handler, true);
                    }
                }
            }
        }
    }

    /// Hands the current line (or a piece of it) to the handler. A piece
    /// ends on a character boundary: up to 3 bytes of a split character
    /// wait for the next one.
    fn emit(&mut self, handler: &OutputHandler, partial: bool) {
        let end = match std::str::from_utf8(&self.partial) {
            Err(e) if partial && e.error_len().is_none() && e.valid_up_to() > 0 => e.valid_up_to(),
            _ => self.partial.len(),
        };
        let text = String::from_utf8_lossy(&self.partial[..end]);
        let cut = Cut {
            start: self.continued,
            end: partial,
        };
        let line = redact_cut(&text, &self.secrets, cut);
        self.partial.drain(..end);
        self.continued = partial;
        handler(OutputLine {
            stream: self.kind,
            line,
            partial,
        });
    }

    /// Flushes a last line without newline to the handler and returns the
    /// capture, redacted before it is cut to the limit.
    pub(crate) fn finish(mut self, handler: Option<&OutputHandler>) -> CapturedText {
        if let Some(handler) = handler {
            if !self.partial.is_empty() || self.continued {
                self.emit(handler, false);
            }
        }
        let truncated = self.total > self.limit;
        let whole = String::from_utf8_lossy(&self.kept);
        let mut text = redact(&whole, &self.secrets);
        if truncated {
            let mut end = text.len().min(self.limit);
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            let cut = Cut {
                start: false,
                end: true,
            };
            text = redact_cut(&text, &self.secrets, cut);
        }
        CapturedText {
            text,
            truncated,
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
        let mut b = StreamBuffer::new(StreamKind::Stdout, 5, Arc::new([]));
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
        let mut b = StreamBuffer::new(StreamKind::Stderr, 100, Arc::new([]));
        b.push(b"one\ntw", Some(&handler));
        b.push(b"o\nthree", Some(&handler));
        let c = b.finish(Some(&handler));
        let lines: Vec<String> = seen.lock().unwrap().clone();
        assert_eq!(lines, ["one", "two", "three"]);
        assert!(!c.truncated);
    }

    fn collect() -> (OutputHandler, Arc<Mutex<Vec<OutputLine>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        (
            Arc::new(move |l: OutputLine| s2.lock().unwrap().push(l)),
            seen,
        )
    }

    #[test]
    fn a_line_without_end_comes_in_bounded_pieces() {
        let (handler, seen) = collect();
        let mut b = StreamBuffer::new(StreamKind::Stdout, 10, Arc::new([]));
        // 5 pieces and a bit, in chunks that do not line up with them.
        let line = "é".repeat(LINE_PIECE * 5 / 2 + 7);
        for chunk in line.as_bytes().chunks(10_000) {
            b.push(chunk, Some(&handler));
        }
        b.push(b"\nnext", Some(&handler));
        let c = b.finish(Some(&handler));
        let seen = seen.lock().unwrap();
        assert!(seen.iter().all(|l| l.line.len() <= LINE_PIECE));
        let pieces: Vec<&OutputLine> = seen.iter().take_while(|l| l.partial).collect();
        assert_eq!(pieces.len(), 5);
        let joined: String = seen[..6].iter().map(|l| l.line.as_str()).collect();
        assert_eq!(joined, line, "no character split or lost");
        assert!(!seen[5].partial);
        assert_eq!(seen[6].line, "next");
        assert_eq!(c.total_bytes, line.len() + 5);
        assert!(c.truncated);
    }

    #[test]
    fn a_cap_never_cuts_a_secret_open() {
        let secret = "AZq7Kx9WmPL3vR8tNc";
        let secrets: Arc<[(String, String)]> = Arc::new([("TOKEN".into(), secret.into())]);
        let text = format!("0123456789{secret}abcdefghij");
        for limit in 1..text.len() {
            let mut b = StreamBuffer::new(StreamKind::Stdout, limit, secrets.clone());
            for chunk in text.as_bytes().chunks(3) {
                b.push(chunk, None);
            }
            let c = b.finish(None);
            assert!(c.truncated);
            for window in secret.as_bytes().windows(4) {
                let window = std::str::from_utf8(window).unwrap();
                assert!(!c.text.contains(window), "cap {limit}: {:?}", c.text);
            }
        }
    }

    #[test]
    fn pieces_of_a_line_never_show_a_secret_they_split() {
        let secret = "AZq7Kx9WmPL3vR8tNc";
        let secrets: Arc<[(String, String)]> = Arc::new([("TOKEN".into(), secret.into())]);
        for offset in 0..secret.len() {
            let (handler, seen) = collect();
            let mut b = StreamBuffer::new(StreamKind::Stdout, 100, secrets.clone());
            let pad = "x".repeat(LINE_PIECE - offset);
            b.push(format!("{pad}{secret} tail\n").as_bytes(), Some(&handler));
            b.finish(Some(&handler));
            for line in seen.lock().unwrap().iter() {
                for window in secret.as_bytes().windows(4) {
                    let window = std::str::from_utf8(window).unwrap();
                    assert!(!line.line.contains(window), "split at {offset}: {window:?}");
                }
            }
        }
    }

    #[test]
    fn tail_respects_char_boundaries() {
        assert_eq!(tail("héllo", 4), "llo");
        assert_eq!(tail("abc", 10), "abc");
    }
}
