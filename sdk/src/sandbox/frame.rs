//! Splitting the auto-IO runner's outputs frame off the program's stdout.
//!
//! The runner ends stdout with `marker` + a JSON object of output texts + a
//! newline (see `preamble::with_frame`). Everything before the marker is the
//! program's own output and is passed on unchanged, byte for byte; the frame
//! is kept apart, bounded. Only the longest tail that could still begin the
//! marker is held back, so live lines are not delayed in practice (the marker
//! starts with an ASCII record separator). The runner ends stderr with the
//! marker alone; [`RunnerEnds`] watches both streams for their ends.

use super::capture::StreamKind;

/// The most bytes a frame may have; a bigger one is dropped and the outputs
/// are downloaded instead.
const MAX_FRAME: usize = 4 << 20;

/// Splits one stdout stream into the program's output and the frame.
#[derive(Debug)]
pub(crate) struct FrameSplitter {
    marker: Vec<u8>,
    held: Vec<u8>,
    frame: Option<Vec<u8>>,
    overflow: bool,
}

impl FrameSplitter {
    pub(crate) fn new(marker: &str) -> Self {
        FrameSplitter {
            marker: marker.as_bytes().to_vec(),
            held: Vec::new(),
            frame: None,
            overflow: false,
        }
    }

    /// Takes the next chunk; returns what of it (and of what was held back)
    /// is the program's output.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        if let Some(frame) = &mut self.frame {
            if frame.len() + bytes.len() > MAX_FRAME {
                self.overflow = true;
            } else {
                frame.extend_from_slice(bytes);
            }
            return Vec::new();
        }
        let mut data = std::mem::take(&mut self.held);
        data.extend_from_slice(bytes);
        if let Some(at) = find(&data, &self.marker) {
            let rest = data.split_off(at + self.marker.len());
            data.truncate(at);
            self.frame = Some(Vec::new());
            self.feed(&rest);
            return data;
        }
        let keep = longest_marker_prefix_suffix(&data, &self.marker);
        self.held = data.split_off(data.len() - keep);
        data
    }

    /// Whether a whole frame has arrived: the stream has ended as far as
    /// the runner is concerned.
    pub(crate) fn is_complete(&self) -> bool {
        !self.overflow && self.frame.as_ref().is_some_and(|f| f.ends_with(b"\n"))
    }

    /// The program's last bytes (a held-back tail that was no marker after
    /// all) and the frame, if a whole one arrived.
    pub(crate) fn finish(self) -> (Vec<u8>, Option<Vec<u8>>) {
        let frame = self.frame.filter(|f| !self.overflow && f.ends_with(b"\n"));
        (self.held, frame)
    }
}

/// Both of the runner's streams: the frame at the end of stdout, the bare
/// marker at the end of stderr. Once both have arrived the runner has
/// finished (see `preamble::with_frame`).
#[derive(Debug)]
pub(crate) struct RunnerEnds {
    stdout: FrameSplitter,
    stderr: FrameSplitter,
}

impl RunnerEnds {
    pub(crate) fn new(marker: &str) -> Self {
        RunnerEnds {
            stdout: FrameSplitter::new(marker),
            stderr: FrameSplitter::new(marker),
        }
    }

    /// Takes the next chunk of `stream`; returns what of it (and of what was
    /// held back) is the program's output.
    pub(crate) fn feed(&mut self, stream: StreamKind, bytes: &[u8]) -> Vec<u8> {
        match stream {
            StreamKind::Stdout => self.stdout.feed(bytes),
            StreamKind::Stderr => self.stderr.feed(bytes),
        }
    }

    /// Whether both streams have ended in their markers.
    pub(crate) fn both_ended(&self) -> bool {
        self.stdout.is_complete() && self.stderr.is_complete()
    }

    /// The program's last stdout and stderr bytes, and the frame if a whole
    /// one arrived.
    pub(crate) fn finish(self) -> (Vec<u8>, Vec<u8>, Option<Vec<u8>>) {
        let (stdout, frame) = self.stdout.finish();
        (stdout, self.stderr.finish().0, frame)
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The length of the longest suffix of `data` that is a proper prefix of `marker`.
fn longest_marker_prefix_suffix(data: &[u8], marker: &[u8]) -> usize {
    let max = (marker.len() - 1).min(data.len());
    (1..=max)
        .rev()
        .find(|&n| data[data.len() - n..] == marker[..n])
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: &str = "\u{1e}dh-abc\u{1e}";

    /// Feeds `chunks`, returns (program output, frame).
    fn split(chunks: &[&[u8]]) -> (Vec<u8>, Option<Vec<u8>>) {
        let mut s = FrameSplitter::new(M);
        let mut out = Vec::new();
        for c in chunks {
            out.extend(s.feed(c));
        }
        let (rest, frame) = s.finish();
        out.extend(rest);
        (out, frame)
    }

    #[test]
    fn the_frame_is_split_off_and_the_output_kept_byte_for_byte() {
        let stream = format!("hello\nno newline{M}{{\"y\": \"42\"}}\n");
        let (out, frame) = split(&[stream.as_bytes()]);
        assert_eq!(out, b"hello\nno newline");
        assert_eq!(frame.unwrap(), b"{\"y\": \"42\"}\n");
    }

    #[test]
    fn a_marker_split_across_chunks_is_found() {
        let stream = format!("out{M}{{}}\n");
        let bytes = stream.as_bytes();
        for cut in 0..bytes.len() {
            for cut2 in cut..bytes.len() {
                let (out, frame) = split(&[&bytes[..cut], &bytes[cut..cut2], &bytes[cut2..]]);
                assert_eq!(out, b"out", "cuts at {cut}, {cut2}");
                assert_eq!(
                    frame.as_deref(),
                    Some(&b"{}\n"[..]),
                    "cuts at {cut}, {cut2}"
                );
            }
        }
    }

    #[test]
    fn without_a_whole_frame_everything_is_output() {
        // No marker at all; a lone record separator; a marker prefix at the end.
        for stream in ["plain\n", "a\u{1e}b\n", "tail \u{1e}dh-a"] {
            let (out, frame) = split(&[stream.as_bytes()]);
            assert_eq!(out, stream.as_bytes());
            assert_eq!(frame, None);
        }
        // A frame cut off before its newline is no frame.
        let cut = format!("x{M}{{\"y\": ");
        assert_eq!(split(&[cut.as_bytes()]).1, None);
    }

    #[test]
    fn live_lines_are_not_held_back() {
        let mut s = FrameSplitter::new(M);
        assert_eq!(s.feed(b"line one\n"), b"line one\n");
        assert_eq!(s.feed(b"partial"), b"partial");
    }

    #[test]
    fn the_frame_is_complete_only_once_its_newline_arrives() {
        let mut s = FrameSplitter::new(M);
        s.feed(b"out");
        assert!(!s.is_complete());
        s.feed(M.as_bytes());
        s.feed(b"{\"y\": ");
        assert!(!s.is_complete());
        s.feed(b"1}\n");
        assert!(s.is_complete());
    }

    #[test]
    fn the_runner_has_ended_once_both_streams_have() {
        let mut ends = RunnerEnds::new(M);
        assert_eq!(ends.feed(StreamKind::Stderr, b"warn\n"), b"warn\n");
        ends.feed(StreamKind::Stdout, format!("out{M}{{}}\n").as_bytes());
        assert!(!ends.both_ended());
        ends.feed(StreamKind::Stderr, format!("{M}\n").as_bytes());
        assert!(ends.both_ended());
        assert_eq!(
            ends.finish(),
            (Vec::new(), Vec::new(), Some(b"{}\n".to_vec()))
        );
    }

    #[test]
    fn an_oversized_frame_is_dropped() {
        let mut s = FrameSplitter::new(M);
        s.feed(M.as_bytes());
        s.feed(&vec![b'x'; MAX_FRAME]);
        s.feed(b"more\n");
        assert!(!s.is_complete());
        assert_eq!(s.finish().1, None);
    }
}
