//! What a host with secrets sends back, with each real value swapped for
//! its placeholder: in header values and in the body, across chunk
//! boundaries. A host that echoes the request (many do: debugging
//! endpoints, error pages that quote the `Authorization` header) must not
//! hand the sandbox the value the gateway put there.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use hyper::header::{HeaderMap, HeaderValue};

/// Real values and the placeholders that stand for them.
#[derive(Clone)]
pub struct Swaps {
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
    longest: usize,
}

// Values must never be printed, even by a debugging line.
impl std::fmt::Debug for Swaps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Swaps")
            .field("count", &self.pairs.len())
            .finish()
    }
}

impl Swaps {
    /// Swaps for these `(value, placeholder)` pairs; empty values are
    /// skipped, and a longer value is tried before a shorter one.
    pub fn new<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Option<Swaps> {
        let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = pairs
            .into_iter()
            .filter(|(value, _)| !value.is_empty())
            .map(|(v, p)| (v.as_bytes().to_vec(), p.as_bytes().to_vec()))
            .collect();
        pairs.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
        pairs.dedup_by(|a, b| a.0 == b.0);
        let longest = pairs.first()?.0.len();
        Some(Swaps { pairs, longest })
    }

    /// The value that starts at `at`, if one does.
    fn at(&self, text: &[u8], at: usize) -> Option<&(Vec<u8>, Vec<u8>)> {
        let rest = &text[at..];
        self.pairs
            .iter()
            .find(|(value, _)| rest.len() >= value.len() && rest.starts_with(value))
    }

    /// Replaces the values in `text`; only those that start before `until`
    /// are looked for. Returns the text up to where it is settled and the
    /// offset in `text` that was settled.
    fn replace_until(&self, text: &[u8], until: usize) -> (Vec<u8>, usize) {
        let mut out = Vec::with_capacity(text.len());
        let firsts: Vec<u8> = self.pairs.iter().map(|(v, _)| v[0]).collect();
        let mut i = 0;
        let mut copied = 0;
        while i < until {
            if firsts.contains(&text[i]) {
                if let Some((value, placeholder)) = self.at(text, i) {
                    out.extend_from_slice(&text[copied..i]);
                    out.extend_from_slice(placeholder);
                    i += value.len();
                    copied = i;
                    continue;
                }
            }
            i += 1;
        }
        let settled = i.max(copied);
        out.extend_from_slice(&text[copied..settled]);
        (out, settled)
    }

    /// `text` with every value replaced.
    pub fn apply(&self, text: &[u8]) -> Vec<u8> {
        self.replace_until(text, text.len()).0
    }

    /// Every header value with the values replaced. A value that would
    /// no longer be a valid header is dropped rather than passed on.
    pub fn headers(&self, headers: &mut HeaderMap) {
        let mut dropped = Vec::new();
        for (name, value) in headers.iter_mut() {
            let bytes = value.as_bytes();
            let swapped = self.apply(bytes);
            if swapped == bytes {
                continue;
            }
            match HeaderValue::from_bytes(&swapped) {
                Ok(v) => *value = v,
                Err(_) => dropped.push(name.clone()),
            }
        }
        for name in dropped {
            headers.remove(name);
        }
    }
}

/// The streaming form: what is held back is at most one value's length
/// less one byte, the most that could still be the start of a value.
pub struct Stream {
    swaps: Swaps,
    held: Vec<u8>,
}

impl Stream {
    pub fn new(swaps: Swaps) -> Stream {
        Stream {
            swaps,
            held: Vec::new(),
        }
    }

    /// The settled part of what has arrived, `chunk` included.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.held.extend_from_slice(chunk);
        let keep = self.swaps.longest - 1;
        if self.held.len() <= keep {
            return Vec::new();
        }
        let until = self.held.len() - keep;
        let (out, settled) = self.swaps.replace_until(&self.held, until);
        self.held.drain(..settled);
        out
    }

    /// What was held back, at the end of the stream.
    pub fn finish(&mut self) -> Vec<u8> {
        let held = std::mem::take(&mut self.held);
        self.swaps.apply(&held)
    }
}

/// A response body with the values replaced; its length is unknown (a
/// placeholder need not be as long as its value).
pub struct RedactedBody<B> {
    inner: B,
    stream: Stream,
    queued: VecDeque<Frame<Bytes>>,
    ended: bool,
}

impl<B> RedactedBody<B> {
    pub fn new(inner: B, swaps: Swaps) -> Self {
        RedactedBody {
            inner,
            stream: Stream::new(swaps),
            queued: VecDeque::new(),
            ended: false,
        }
    }
}

impl<B> Body for RedactedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        loop {
            if let Some(frame) = this.queued.pop_front() {
                return Poll::Ready(Some(Ok(frame)));
            }
            if this.ended {
                return Poll::Ready(None);
            }
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(data) => {
                        let out = this.stream.push(&data);
                        if !out.is_empty() {
                            this.queued.push_back(Frame::data(Bytes::from(out)));
                        }
                    }
                    Err(mut trailers) => {
                        let rest = this.stream.finish();
                        if !rest.is_empty() {
                            this.queued.push_back(Frame::data(Bytes::from(rest)));
                        }
                        if let Some(t) = trailers.trailers_mut() {
                            this.stream.swaps.headers(t);
                        }
                        this.queued.push_back(trailers);
                    }
                },
                Poll::Ready(None) => {
                    this.ended = true;
                    let rest = this.stream.finish();
                    if !rest.is_empty() {
                        this.queued.push_back(Frame::data(Bytes::from(rest)));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended && self.queued.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn swaps() -> Swaps {
        Swaps::new([
            ("sk-real-value-1", "dh-ph-aaaa"),
            ("other-real", "dh-ph-bbbb"),
        ])
        .unwrap()
    }

    #[test]
    fn values_become_placeholders_anywhere() {
        let s = swaps();
        assert_eq!(
            s.apply(b"Bearer sk-real-value-1 and other-real, sk-real-value-1"),
            b"Bearer dh-ph-aaaa and dh-ph-bbbb, dh-ph-aaaa".to_vec()
        );
        assert_eq!(s.apply(b"sk-real-value-"), b"sk-real-value-".to_vec());
        assert_eq!(s.apply(b""), b"".to_vec());
    }

    #[test]
    fn every_split_of_a_stream_gives_the_same_text() {
        let s = swaps();
        let text = b"xx sk-real-value-1sk-real-value-1 yy other-realother-real sk-real-value- z";
        let whole = s.apply(text);
        let shown = String::from_utf8_lossy(&whole).into_owned();
        assert!(
            !shown.contains("sk-real-value-1") && !shown.contains("other-real"),
            "{shown}"
        );
        for size in 1..text.len() {
            let mut stream = Stream::new(s.clone());
            let mut out = Vec::new();
            for chunk in text.chunks(size) {
                out.extend(stream.push(chunk));
            }
            out.extend(stream.finish());
            assert_eq!(out, whole, "chunks of {size}");
        }
        // Two-way splits at every point.
        for cut in 0..=text.len() {
            let mut stream = Stream::new(s.clone());
            let mut out = stream.push(&text[..cut]);
            out.extend(stream.push(&text[cut..]));
            out.extend(stream.finish());
            assert_eq!(out, whole, "cut at {cut}");
        }
    }

    #[test]
    fn the_longer_of_two_overlapping_values_wins() {
        let s = Swaps::new([("abc", "P1"), ("abcdef", "P2")]).unwrap();
        assert_eq!(s.apply(b"abcdef abc"), b"P2 P1".to_vec());
    }

    #[test]
    fn headers_are_redacted_and_debug_hides_values() {
        let s = swaps();
        let mut headers = HeaderMap::new();
        headers.insert("x-echo", HeaderValue::from_static("Bearer sk-real-value-1"));
        headers.insert("x-other", HeaderValue::from_static("fine"));
        s.headers(&mut headers);
        assert_eq!(headers["x-echo"], "Bearer dh-ph-aaaa");
        assert_eq!(headers["x-other"], "fine");
        assert!(!format!("{s:?}").contains("real"));
    }

    /// A body of ready chunks.
    struct Chunks(VecDeque<Bytes>);

    impl Body for Chunks {
        type Data = Bytes;
        type Error = std::convert::Infallible;
        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.get_mut().0.pop_front().map(|c| Ok(Frame::data(c))))
        }
    }

    #[tokio::test]
    async fn a_body_split_mid_value_comes_out_redacted() {
        use http_body_util::BodyExt;
        let chunks = ["echo: sk-re", "al-va", "lue-1 end", ""].map(Bytes::from);
        let body = RedactedBody::new(Chunks(chunks.into()), swaps());
        let collected = body.collect().await.unwrap().to_bytes();
        assert_eq!(&collected[..], b"echo: dh-ph-aaaa end");
    }
}
