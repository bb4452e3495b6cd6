//! Just enough HTTP to speak to the Docker daemon over its Unix socket.
//!
//! Requests are HTTP/1.0: the daemon then sends plain bodies (never chunked)
//! and closes the connection at their end, so a body is "everything after
//! the headers" and a stream (`/events`) is read line by line until it ends.
//! The daemon is the only peer; nothing a container says reaches this code.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// Where the daemon's socket appears inside the watchdog's container.
pub const SOCKET: &str = "/run/dockhand/docker.sock";
/// How long one request may take before the watchdog gives up on it.
const TIMEOUT: Duration = Duration::from_secs(60);
/// The most a listing may hold: the daemon's answers for one owner's objects
/// are far smaller; a bigger one is cut, not held.
const MAX_BODY: u64 = 64 * 1024 * 1024;

/// A daemon's answer.
#[derive(Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Sends `method path` and returns the whole answer.
pub fn request(method: &str, path: &str) -> io::Result<Response> {
    let mut reader = open(method, path, Some(TIMEOUT))?;
    let status = read_head(&mut reader)?;
    let mut body = Vec::new();
    reader.take(MAX_BODY).read_to_end(&mut body)?;
    Ok(Response { status, body })
}

/// Sends `GET path` and returns the body as a stream of lines (no timeout:
/// the daemon sends when it has something).
pub fn stream(path: &str) -> io::Result<(u16, BufReader<UnixStream>)> {
    let mut reader = open("GET", path, None)?;
    let status = read_head(&mut reader)?;
    Ok((status, reader))
}

fn open(method: &str, path: &str, timeout: Option<Duration>) -> io::Result<BufReader<UnixStream>> {
    let mut socket = UnixStream::connect(SOCKET)?;
    socket.set_read_timeout(timeout)?;
    socket.set_write_timeout(Some(TIMEOUT))?;
    socket.write_all(request_text(method, path).as_bytes())?;
    Ok(BufReader::new(socket))
}

fn request_text(method: &str, path: &str) -> String {
    format!("{method} {path} HTTP/1.0\r\nHost: docker\r\nContent-Length: 0\r\n\r\n")
}

/// Reads the status line and headers; returns the status code.
fn read_head(reader: &mut impl BufRead) -> io::Result<u16> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let status = parse_status(&line)?;
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            return Ok(status);
        }
    }
}

fn parse_status(line: &str) -> io::Result<u16> {
    let mut parts = line.split_whitespace();
    match (parts.next(), parts.next().and_then(|s| s.parse().ok())) {
        (Some(version), Some(status)) if version.starts_with("HTTP/") => Ok(status),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("not an HTTP status line: {:?}", line.trim_end()),
        )),
    }
}

/// Percent-encodes a query value (everything but RFC 3986's unreserved set).
pub fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len() * 3);
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_http_1_0_so_bodies_are_never_chunked() {
        assert_eq!(
            request_text("DELETE", "/volumes/v1"),
            "DELETE /volumes/v1 HTTP/1.0\r\nHost: docker\r\nContent-Length: 0\r\n\r\n"
        );
    }

    #[test]
    fn the_head_is_read_up_to_the_body() {
        let raw = b"HTTP/1.0 200 OK\r\nApi-Version: 1.41\r\nContent-Type: application/json\r\n\r\n[{\"Id\":\"a\"}]";
        let mut reader = BufReader::new(&raw[..]);
        assert_eq!(read_head(&mut reader).unwrap(), 200);
        let mut body = String::new();
        reader.read_to_string(&mut body).unwrap();
        assert_eq!(body, "[{\"Id\":\"a\"}]");
    }

    #[test]
    fn a_status_line_that_is_not_http_is_an_error() {
        assert!(parse_status("SSH-2.0-OpenSSH\r\n").is_err());
        assert!(parse_status("").is_err());
        assert_eq!(parse_status("HTTP/1.1 404 Not Found\r\n").unwrap(), 404);
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(
            encode("{\"label\":[\"a=b\"]}"),
            "%7B%22label%22%3A%5B%22a%3Db%22%5D%7D"
        );
        assert_eq!(encode("abc-1.2_3~"), "abc-1.2_3~");
    }
}
