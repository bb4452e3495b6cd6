//! The Connect protocol as envd speaks it, with the JSON codec the E2B SDKs
//! use: unary calls are plain JSON bodies; server streams are enveloped
//! messages (a flags byte, a big-endian length, the JSON) ending with an
//! end-of-stream envelope that carries the error, if any.

use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::{BufMut, Bytes, BytesMut};
use futures::{Stream, StreamExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

/// The flag of the envelope that ends a stream.
const END_STREAM: u8 = 0x02;
/// The flag of a compressed envelope (never sent by the E2B SDKs).
const COMPRESSED: u8 = 0x01;

/// A Connect error: a code from the protocol's list and a message.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectError {
    /// `not_found`, `invalid_argument`, ...
    pub code: &'static str,
    /// What went wrong, for a person.
    pub message: String,
}

impl ConnectError {
    /// An error with this code.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        ConnectError {
            code,
            message: message.into(),
        }
    }

    /// The HTTP status of a unary error (the protocol's mapping).
    pub fn status(&self) -> StatusCode {
        match self.code {
            "canceled" => StatusCode::REQUEST_TIMEOUT,
            "invalid_argument" | "failed_precondition" | "out_of_range" => StatusCode::BAD_REQUEST,
            "deadline_exceeded" => StatusCode::GATEWAY_TIMEOUT,
            "not_found" => StatusCode::NOT_FOUND,
            "already_exists" | "aborted" => StatusCode::CONFLICT,
            "permission_denied" => StatusCode::FORBIDDEN,
            "resource_exhausted" => StatusCode::TOO_MANY_REQUESTS,
            "unimplemented" => StatusCode::NOT_IMPLEMENTED,
            "unavailable" => StatusCode::SERVICE_UNAVAILABLE,
            "unauthenticated" => StatusCode::UNAUTHORIZED,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn body(&self) -> Value {
        json!({"code": self.code, "message": self.message})
    }
}

/// The error of a request body that is not what the method takes.
fn bad_request(message: impl Into<String>) -> ConnectError {
    ConnectError::new("invalid_argument", message)
}

/// Decodes a unary request (plain JSON; an empty body is `{}`).
pub fn unary_request<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<T, ConnectError> {
    check_codec(headers, "application/json")?;
    let body = if body.is_empty() {
        b"{}" as &[u8]
    } else {
        body
    };
    serde_json::from_slice(body).map_err(|e| bad_request(format!("bad request message: {e}")))
}

/// Decodes the single message of a server-stream request.
pub fn stream_request<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<T, ConnectError> {
    check_codec(headers, "application/connect+json")?;
    let mut messages = envelopes(body)?;
    let first = messages
        .next()
        .ok_or_else(|| bad_request("the request stream carried no message"))?;
    serde_json::from_slice(first).map_err(|e| bad_request(format!("bad request message: {e}")))
}

/// Decodes every message of a client-stream request body.
pub fn stream_messages<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Vec<T>, ConnectError> {
    check_codec(headers, "application/connect+json")?;
    envelopes(body)?
        .map(|m| {
            serde_json::from_slice(m).map_err(|e| bad_request(format!("bad request message: {e}")))
        })
        .collect()
}

fn check_codec(headers: &HeaderMap, expected: &str) -> Result<(), ConnectError> {
    let given = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or(expected);
    let given = given.split(';').next().unwrap_or("").trim();
    if given.eq_ignore_ascii_case(expected) {
        return Ok(());
    }
    Err(ConnectError::new(
        "unimplemented",
        format!(
            "content type {given} is not served: dockhand serve speaks Connect with the JSON codec ({expected}), as the E2B SDKs do"
        ),
    ))
}

/// The data envelopes of a body; an end-of-stream envelope ends them.
fn envelopes(body: &[u8]) -> Result<impl Iterator<Item = &[u8]>, ConnectError> {
    let mut out = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        if rest.len() < 5 {
            return Err(bad_request("a truncated Connect envelope"));
        }
        let flags = rest[0];
        let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
        let Some(message) = rest.get(5..5 + len) else {
            return Err(bad_request("a Connect envelope longer than its body"));
        };
        if flags & COMPRESSED != 0 {
            return Err(ConnectError::new(
                "unimplemented",
                "compressed messages are not accepted",
            ));
        }
        if flags & END_STREAM != 0 {
            break;
        }
        out.push(message);
        rest = &rest[5 + len..];
    }
    Ok(out.into_iter())
}

fn envelope(flags: u8, message: &Value) -> Bytes {
    let json = serde_json::to_vec(message).unwrap_or_else(|_| b"{}".to_vec());
    let mut out = BytesMut::with_capacity(5 + json.len());
    out.put_u8(flags);
    out.put_u32(json.len() as u32);
    out.put_slice(&json);
    out.freeze()
}

/// The response of a unary call.
pub fn unary_response<T: Serialize>(result: Result<T, ConnectError>) -> Response {
    match result {
        Ok(message) => (
            [(header::CONTENT_TYPE, "application/json")],
            serde_json::to_vec(&message).unwrap_or_else(|_| b"{}".to_vec()),
        )
            .into_response(),
        Err(e) => unary_error(&e),
    }
}

/// A unary call's error response.
pub fn unary_error(e: &ConnectError) -> Response {
    (
        e.status(),
        [(header::CONTENT_TYPE, "application/json")],
        e.body().to_string(),
    )
        .into_response()
}

/// Set once the server is shutting down: open streams end.
fn draining() -> &'static tokio::sync::watch::Sender<bool> {
    static DRAINING: std::sync::OnceLock<tokio::sync::watch::Sender<bool>> =
        std::sync::OnceLock::new();
    DRAINING.get_or_init(|| tokio::sync::watch::channel(false).0)
}

/// Ends every open stream, now and from now on, with a retryable
/// `unavailable` error: the server is shutting down, and a client should
/// go on through another server (or this one once it is back).
pub fn start_draining() {
    draining().send_replace(true);
}

/// The error that ends a stream at shutdown.
fn shutting_down() -> ConnectError {
    ConnectError::new(
        "unavailable",
        "the server is shutting down; the sandbox runs on: reconnect to it through another server, or this one once it is back",
    )
}

/// The response of a server stream: each item a message, until the first
/// error, which ends the stream in its end-of-stream envelope. A shutdown
/// ends it too, with a retryable `unavailable`.
pub fn stream_response(
    messages: impl Stream<Item = Result<Value, ConnectError>> + Send + 'static,
) -> Response {
    let body = futures::stream::unfold(
        (Box::pin(messages), false, draining().subscribe()),
        |(mut messages, done, mut drain)| async move {
            if done {
                return None;
            }
            let next = tokio::select! {
                biased;
                next = messages.next() => next,
                _ = drain.wait_for(|draining| *draining) => Some(Err(shutting_down())),
            };
            let frame = match next {
                Some(Ok(message)) => (envelope(0, &message), false),
                Some(Err(e)) => (envelope(END_STREAM, &json!({"error": e.body()})), true),
                None => (envelope(END_STREAM, &json!({})), true),
            };
            Some((
                Ok::<_, std::convert::Infallible>(frame.0),
                (messages, frame.1, drain),
            ))
        },
    );
    (
        [(header::CONTENT_TYPE, "application/connect+json")],
        Body::from_stream(body),
    )
        .into_response()
}

/// A stream that is only an error (answered with HTTP 200, as the protocol
/// has it for streams).
pub fn stream_error(e: ConnectError) -> Response {
    stream_response(futures::stream::once(async move { Err(e) }))
}

/// The client's deadline (`Connect-Timeout-Ms`).
pub fn deadline(headers: &HeaderMap) -> Option<Duration> {
    let ms: u64 = headers
        .get("connect-timeout-ms")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    Some(Duration::from_millis(ms))
}

/// How often the client wants keepalive messages (`Keepalive-Ping-Interval`,
/// seconds), at least every 5 s and at most every 60 s.
pub fn keepalive(headers: &HeaderMap) -> Duration {
    let secs: u64 = headers
        .get("keepalive-ping-interval")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(50);
    Duration::from_secs(secs.clamp(5, 60))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(content_type: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, content_type.parse().unwrap());
        h
    }

    #[test]
    fn stream_requests_are_unwrapped_from_their_envelope() {
        let wrapped = envelope(0, &json!({"path": "/tmp"}));
        let v: Value = stream_request(&headers("application/connect+json"), &wrapped).unwrap();
        assert_eq!(v["path"], "/tmp");
        let two = [
            envelope(0, &json!({"n": 1})),
            envelope(0, &json!({"n": 2})),
            envelope(END_STREAM, &json!({})),
        ]
        .concat();
        let all: Vec<Value> = stream_messages(&headers("application/connect+json"), &two).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all[1]["n"], 2);
    }

    #[test]
    fn malformed_and_foreign_bodies_are_refused_with_codes() {
        let h = headers("application/connect+json");
        let e = stream_request::<Value>(&h, &[0, 0, 0, 0, 9, b'{']).unwrap_err();
        assert_eq!(e.code, "invalid_argument");
        let e = stream_request::<Value>(&h, &[0, 0]).unwrap_err();
        assert_eq!(e.code, "invalid_argument");
        let e = unary_request::<Value>(&headers("application/proto"), b"").unwrap_err();
        assert_eq!(
            (e.code, e.status()),
            ("unimplemented", StatusCode::NOT_IMPLEMENTED)
        );
        let v: Value = unary_request(&headers("application/json; charset=utf-8"), b"").unwrap();
        assert_eq!(v, json!({}));
    }

    #[test]
    fn error_codes_map_to_the_protocols_statuses() {
        assert_eq!(
            ConnectError::new("not_found", "").status(),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            ConnectError::new("already_exists", "").status(),
            StatusCode::CONFLICT
        );
        assert_eq!(
            ConnectError::new("weird", "").status(),
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }

    #[test]
    fn deadlines_and_keepalives_come_from_headers() {
        let mut h = HeaderMap::new();
        assert_eq!(deadline(&h), None);
        h.insert("connect-timeout-ms", "1500".parse().unwrap());
        h.insert("keepalive-ping-interval", "1".parse().unwrap());
        assert_eq!(deadline(&h), Some(Duration::from_millis(1500)));
        assert_eq!(keepalive(&h), Duration::from_secs(5));
    }
}
