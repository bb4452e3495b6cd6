//! Typed failures of an execution, written for a model to act on: the kind,
//! the message, and the line and column in the user's code.

use std::collections::HashSet;

use monty_types::MontyException;
use serde_json::{json, Value};

use crate::rules::{thousands, Prepared, Rejected};

/// Error messages are for a model to read: kept this short.
const MESSAGE_LIMIT: usize = 4096;

/// Ends an execution with a typed error for the host.
#[derive(Debug, Clone, PartialEq)]
pub struct Failed {
    pub kind: &'static str,
    pub message: String,
    pub rule: Option<&'static str>,
    pub exception_type: Option<String>,
    pub line: usize,
    pub col: usize,
}

impl Failed {
    pub fn new(kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: clip(message.into()),
            rule: None,
            exception_type: None,
            line: 0,
            col: 0,
        }
    }

    pub fn at(mut self, line: usize, col: usize) -> Self {
        self.line = line;
        self.col = col;
        self
    }

    pub fn validation(rule: &'static str, message: impl Into<String>) -> Self {
        Self {
            rule: Some(rule),
            ..Self::new("validation", message)
        }
    }

    /// The `error` object of a `result` message.
    pub fn to_json(&self) -> Value {
        let mut error = json!({"kind": self.kind, "message": self.message});
        if let Some(rule) = self.rule {
            error["rule"] = json!(rule);
        }
        if let Some(t) = &self.exception_type {
            error["type"] = json!(t);
        }
        if self.line > 0 {
            error["line"] = json!(self.line);
            error["col"] = json!(self.col);
        }
        error
    }
}

impl From<Rejected> for Failed {
    fn from(r: Rejected) -> Self {
        Failed::validation(r.rule, r.message).at(r.line, r.col)
    }
}

fn clip(text: String) -> String {
    let count = text.chars().count();
    if count <= MESSAGE_LIMIT {
        return text;
    }
    let head: String = text.chars().take(MESSAGE_LIMIT).collect();
    format!("{head}... ({} characters in all)", thousands(count))
}

/// (line, column) in the user's code of the innermost frame of the user's feed.
pub fn frame_of(error: &MontyException, prepared: Option<&Prepared>) -> (usize, usize) {
    let (mut line, mut col) = (0, 0);
    for f in error.traceback() {
        if is_user_feed(&f.filename) {
            line = f.start.line as usize;
            col = f.start.column as usize;
        }
    }
    if let (Some(p), true) = (prepared, line > 0) {
        line = p.user_line(line);
        col = p.user_column(line, col);
    }
    (line, col)
}

/// `<python-input-0>` is the prelude; later feeds are the user's.
fn is_user_feed(filename: &str) -> bool {
    filename.starts_with("<python-input-") && filename != "<python-input-0>"
}

/// A Python exception the code raised (or a limit Monty enforced).
pub fn runtime_error(
    error: &MontyException,
    prepared: Option<&Prepared>,
    tool_errors: &HashSet<String>,
    loop_limit: u64,
) -> Failed {
    let kind = error.exc_type().to_string();
    let message = error.message().unwrap_or_default().to_string();
    let (line, col) = frame_of(error, prepared);
    if kind == "TimeoutError" && message.contains("time limit") {
        return Failed::new("timeout", message);
    }
    if kind == "MemoryError" && message.contains("memory limit") {
        return Failed::new("memory", message);
    }
    if kind == "KeyboardInterrupt" && message.contains("_dh_loop_limit") {
        let loop_line: usize = message
            .rsplit(':')
            .next()
            .unwrap_or_default()
            .chars()
            .filter(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap_or(0);
        return Failed::new(
            "loop_limit",
            format!(
                "the loop at line {loop_line} ran more than {} iterations",
                thousands(loop_limit as usize)
            ),
        )
        .at(loop_line, 0);
    }
    if kind == "RuntimeError" && tool_errors.contains(&message) {
        return Failed::new("tool", message).at(line, col);
    }
    Failed {
        exception_type: Some(kind),
        ..Failed::new("runtime", message).at(line, col)
    }
}

/// Monty's type checker refused the code: its report, and the first
/// `file:line:col` it names.
pub fn typing_error(report: &str, prepared: Option<&Prepared>) -> Failed {
    let (mut line, mut col) = (0, 0);
    for word in report.split_whitespace() {
        let parts: Vec<&str> = word.trim_end_matches(':').split(':').collect();
        if parts.len() >= 3 {
            let (l, c) = (parts[parts.len() - 2], parts[parts.len() - 1]);
            if let (Ok(l), Ok(c)) = (l.parse(), c.parse()) {
                (line, col) = (l, c);
                break;
            }
        }
    }
    if let (Some(p), true) = (prepared, line > 0) {
        line = p.user_line(line);
        col = p.user_column(line, col);
    }
    Failed::validation("type", report.trim()).at(line, col)
}

#[cfg(test)]
mod tests {
    use super::*;
    use monty_types::ExcType;

    #[test]
    fn long_messages_are_clipped() {
        let f = Failed::new("runtime", "x".repeat(5000));
        assert!(f.message.ends_with("(5,000 characters in all)"));
    }

    #[test]
    fn the_loop_guard_reads_as_the_loop_limit() {
        let e = MontyException::new(ExcType::KeyboardInterrupt, Some("_dh_loop_limit:7".into()));
        let f = runtime_error(&e, None, &HashSet::new(), 10_000);
        assert_eq!((f.kind, f.line), ("loop_limit", 7));
        assert!(f.message.contains("10,000"), "{}", f.message);
    }

    #[test]
    fn a_typing_report_gives_its_position() {
        let f = typing_error("error[invalid-argument-type]: main.py:3:5: bad", None);
        assert_eq!((f.line, f.col, f.rule), (3, 5, Some("type")));
    }
}
