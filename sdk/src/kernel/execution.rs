//! What a run produced: output, rich results, an error. Built from the
//! kernel's Jupyter messages by [`Collector`], which is pure.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use jupyter_protocol::{ExecutionState, JupyterMessage, JupyterMessageContent, Stdio};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The MIME type of a matplotlib figure's data (see [`Chart`]).
pub const CHART_MIME: &str = "application/vnd.dockhand.chart+json";
/// The MIME type of a pandas DataFrame's data (`columns`, `index`, `data`,
/// `shape`, `truncated`: the first 1000 rows).
pub const DATAFRAME_MIME: &str = "application/vnd.dockhand.dataframe+json";

/// One result: a MIME bundle, from the last expression (`is_main`) or a
/// `display()` (matplotlib figures are displayed when a run ends).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct RichResult {
    /// MIME type -> value (text as a string, images base64, JSON as JSON).
    pub data: BTreeMap<String, Value>,
    /// The kernel's metadata for the bundle (image sizes, say).
    pub metadata: serde_json::Map<String, Value>,
    /// Whether this is the value of the run's last expression.
    pub is_main: bool,
    /// MIME types cut or dropped for being over the payload limit.
    pub cut: Vec<String>,
}

impl RichResult {
    fn text_of(&self, mime: &str) -> Option<&str> {
        self.data.get(mime).and_then(Value::as_str)
    }

    fn bytes_of(&self, mime: &str) -> Option<Vec<u8>> {
        let text: String = self.text_of(mime)?.split_whitespace().collect();
        base64::engine::general_purpose::STANDARD.decode(text).ok()
    }

    /// `text/plain`.
    pub fn text(&self) -> Option<&str> {
        self.text_of("text/plain")
    }
    /// `text/html` (a DataFrame's table, say).
    pub fn html(&self) -> Option<&str> {
        self.text_of("text/html")
    }
    /// `text/markdown`.
    pub fn markdown(&self) -> Option<&str> {
        self.text_of("text/markdown")
    }
    /// `text/latex`.
    pub fn latex(&self) -> Option<&str> {
        self.text_of("text/latex")
    }
    /// `image/svg+xml`.
    pub fn svg(&self) -> Option<&str> {
        self.text_of("image/svg+xml")
    }
    /// `application/javascript`.
    pub fn javascript(&self) -> Option<&str> {
        self.text_of("application/javascript")
    }
    /// `image/png`, decoded.
    pub fn png(&self) -> Option<Vec<u8>> {
        self.bytes_of("image/png")
    }
    /// `image/jpeg`, decoded.
    pub fn jpeg(&self) -> Option<Vec<u8>> {
        self.bytes_of("image/jpeg")
    }
    /// `application/pdf`, decoded.
    pub fn pdf(&self) -> Option<Vec<u8>> {
        self.bytes_of("application/pdf")
    }
    /// `application/json`.
    pub fn json(&self) -> Option<&Value> {
        self.data.get("application/json")
    }
    /// A DataFrame's data (see [`DATAFRAME_MIME`]).
    pub fn dataframe(&self) -> Option<&Value> {
        self.data.get(DATAFRAME_MIME)
    }
    /// A matplotlib figure as data.
    pub fn chart(&self) -> Option<Chart> {
        serde_json::from_value(self.data.get(CHART_MIME)?.clone()).ok()
    }
}

/// A matplotlib figure as data: what a model can read without seeing it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Chart {
    /// `line`, `bar`, `scatter`, `pie`, `composite` (several axes, each a
    /// chart in `elements`) or `unknown`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The axes' title (the figure's for `composite`).
    #[serde(default)]
    pub title: String,
    /// The x axis label.
    #[serde(default)]
    pub x_label: String,
    /// The y axis label.
    #[serde(default)]
    pub y_label: String,
    /// Lines (`label`, `x`, `y`), bars (`label`, `group`, `value`), point
    /// sets (`label`, `points`), wedges (`label`, `angle`) or sub-charts.
    #[serde(default)]
    pub elements: Vec<Value>,
}

/// The code raised: as data, not as a Rust error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ExecutionError {
    /// The exception's type (`ZeroDivisionError`).
    pub name: String,
    /// Its message.
    pub value: String,
    /// The traceback, without terminal colour codes.
    pub traceback: String,
    /// The line of the run's code it was raised at, when the traceback says.
    pub line: Option<u32>,
}

/// What one run produced. A run that raised is still `Ok`: see `error`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Execution {
    /// Everything printed to stdout (capped).
    pub stdout: String,
    /// Everything printed to stderr (capped).
    pub stderr: String,
    /// Whether stdout was cut at the text limit.
    pub stdout_truncated: bool,
    /// Whether stderr was cut at the text limit.
    pub stderr_truncated: bool,
    /// Results in the order they came.
    pub results: Vec<RichResult>,
    /// The exception the code raised, if it did.
    pub error: Option<ExecutionError>,
    /// The kernel's execution counter for this run.
    pub execution_count: Option<u64>,
    /// Wall time, as the host saw it.
    pub duration: Duration,
}

impl Execution {
    /// The last expression's value, if the run ended with one.
    pub fn main_result(&self) -> Option<&RichResult> {
        self.results.iter().find(|r| r.is_main)
    }

    /// The last expression's `text/plain`, if any.
    pub fn text(&self) -> Option<&str> {
        self.main_result().and_then(RichResult::text)
    }

    /// Whether the code ran without raising.
    pub fn success(&self) -> bool {
        self.error.is_none()
    }

    /// Every PNG among the results, decoded.
    pub fn pngs(&self) -> Vec<Vec<u8>> {
        self.results.iter().filter_map(RichResult::png).collect()
    }
}

/// Something a run produced, as it happens.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum KernelEvent {
    /// Text printed to stdout.
    Stdout(String),
    /// Text printed to stderr.
    Stderr(String),
    /// A result or display.
    Result(RichResult),
    /// The code raised.
    Error(ExecutionError),
}

/// Folds a run's messages into an [`Execution`].
pub(crate) struct Collector {
    pub(crate) execution: Execution,
    text_limit: usize,
    replied: bool,
    idle: bool,
    /// Some message of the run has come: the kernel has taken it up.
    heard: bool,
}

impl Collector {
    pub(crate) fn new(text_limit: usize) -> Self {
        Collector {
            execution: Execution::default(),
            text_limit,
            replied: false,
            idle: false,
            heard: false,
        }
    }

    /// Whether the kernel has begun the run (any of its messages came).
    pub(crate) fn heard(&self) -> bool {
        self.heard
    }

    /// Whether the reply and the kernel's return to idle have both come.
    pub(crate) fn done(&self) -> bool {
        self.replied && self.idle
    }

    /// Whether a run that is done may still have its value on the way:
    /// Deno's kernel sometimes sends a run's `execute_result` just after its
    /// reply and `idle` (8 runs in 150 here, a tenth of a millisecond
    /// after). It sends one at most, and none after an error.
    pub(crate) fn value_may_trail(&self) -> bool {
        self.done()
            && self.execution.error.is_none()
            && !self.execution.results.iter().any(|r| r.is_main)
    }

    /// The relay dropped the rest of a stream.
    pub(crate) fn cut(&mut self, stream: &str) {
        match stream {
            "stderr" => self.execution.stderr_truncated = true,
            _ => self.execution.stdout_truncated = true,
        }
    }

    /// Takes one message of this run; returns what to tell a live listener.
    pub(crate) fn take(&mut self, message: JupyterMessage) -> Option<KernelEvent> {
        self.heard = true;
        let cut_of = |metadata: &serde_json::Map<String, Value>| -> Vec<String> {
            metadata
                .get("dockhand_cut")
                .and_then(|v| serde_json::from_value(v.clone()).ok())
                .unwrap_or_default()
        };
        match message.content {
            JupyterMessageContent::StreamContent(s) => {
                let (buffer, truncated) = match s.name {
                    Stdio::Stderr => (
                        &mut self.execution.stderr,
                        &mut self.execution.stderr_truncated,
                    ),
                    Stdio::Stdout => (
                        &mut self.execution.stdout,
                        &mut self.execution.stdout_truncated,
                    ),
                };
                let room = self.text_limit.saturating_sub(buffer.len());
                if s.text.len() > room {
                    *truncated = true;
                }
                buffer.push_str(cut_at_char(&s.text, room));
                Some(match s.name {
                    Stdio::Stderr => KernelEvent::Stderr(s.text),
                    Stdio::Stdout => KernelEvent::Stdout(s.text),
                })
            }
            JupyterMessageContent::ExecuteResult(r) => {
                let mut metadata = r.metadata;
                let cut = cut_of(&metadata);
                metadata.remove("dockhand_cut");
                Some(self.push(bundle(&r.data), metadata, true, cut))
            }
            JupyterMessageContent::DisplayData(d) => {
                let mut metadata = d.metadata;
                let cut = cut_of(&metadata);
                metadata.remove("dockhand_cut");
                Some(self.push(bundle(&d.data), metadata, false, cut))
            }
            JupyterMessageContent::ErrorOutput(e) => {
                let error = error_of(&e.ename, &e.evalue, &e.traceback);
                self.execution.error = Some(error.clone());
                Some(KernelEvent::Error(error))
            }
            JupyterMessageContent::ExecuteReply(r) => {
                self.replied = true;
                self.execution.execution_count = Some(r.execution_count.value() as u64);
                if self.execution.error.is_none() {
                    if let Some(e) = r.error {
                        self.execution.error = Some(error_of(&e.ename, &e.evalue, &e.traceback));
                    }
                }
                None
            }
            JupyterMessageContent::Status(s) => {
                if s.execution_state == ExecutionState::Idle {
                    self.idle = true;
                }
                None
            }
            _ => None,
        }
    }

    fn push(
        &mut self,
        data: BTreeMap<String, Value>,
        metadata: serde_json::Map<String, Value>,
        is_main: bool,
        cut: Vec<String>,
    ) -> KernelEvent {
        let result = RichResult {
            data,
            metadata,
            is_main,
            cut,
        };
        self.execution.results.push(result.clone());
        KernelEvent::Result(result)
    }
}

fn bundle(media: &jupyter_protocol::Media) -> BTreeMap<String, Value> {
    match serde_json::to_value(media) {
        Ok(Value::Object(map)) => map.into_iter().collect(),
        _ => BTreeMap::new(),
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a char boundary.
fn cut_at_char(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

pub(crate) fn error_of(name: &str, value: &str, traceback: &[String]) -> ExecutionError {
    let traceback = strip_ansi(&traceback.join("\n"));
    ExecutionError {
        name: name.to_string(),
        value: value.to_string(),
        line: user_line(&traceback),
        traceback,
    }
}

/// Removes terminal escape sequences (colours) from a traceback.
pub(crate) fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        if chars.peek() == Some(&'[') {
            chars.next();
            // Parameters and intermediates, then one final byte in @..~.
            for c in chars.by_ref() {
                if ('@'..='~').contains(&c) {
                    break;
                }
            }
        }
    }
    out
}

/// The line in the run's own code: IPython names it `Cell In[N], line L`
/// (the last such frame is the innermost one in the cell).
fn user_line(traceback: &str) -> Option<u32> {
    let at = traceback.rfind("Cell In[")?;
    let rest = &traceback[at..];
    let line = rest.split(", line ").nth(1)?;
    line.chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(msg_type: &str, content: Value) -> JupyterMessage {
        serde_json::from_value(json!({
            "header": {"msg_id": "x", "username": "k", "session": "s", "msg_type": msg_type, "version": "5.3", "date": "2026-01-01T00:00:00Z"},
            "parent_header": {"msg_id": "p", "username": "h", "session": "s", "msg_type": "execute_request", "version": "5.3", "date": "2026-01-01T00:00:00Z"},
            "metadata": {},
            "content": content,
        }))
        .unwrap()
    }

    #[test]
    fn a_run_is_folded_from_its_messages() {
        let mut c = Collector::new(8);
        c.take(message(
            "stream",
            json!({"name": "stdout", "text": "hello "}),
        ));
        c.take(message(
            "stream",
            json!({"name": "stdout", "text": "world"}),
        ));
        c.take(message("display_data", json!({"data": {"text/plain": "<Figure>", "image/png": "aGk="}, "metadata": {"dockhand_cut": ["image/svg+xml"]}})));
        c.take(message(
            "execute_result",
            json!({"execution_count": 3, "data": {"text/plain": "2"}, "metadata": {}}),
        ));
        assert!(!c.done());
        c.take(message(
            "execute_reply",
            json!({"status": "ok", "execution_count": 3, "user_expressions": {}, "payload": []}),
        ));
        c.take(message("status", json!({"execution_state": "idle"})));
        assert!(c.done());
        let ex = c.execution;
        assert_eq!(
            (ex.stdout.as_str(), ex.stdout_truncated),
            ("hello wo", true)
        );
        assert_eq!(ex.text(), Some("2"));
        assert_eq!(ex.results[0].png().unwrap(), b"hi");
        assert_eq!(ex.results[0].cut, ["image/svg+xml"]);
        assert!(!ex.results[0].metadata.contains_key("dockhand_cut"));
        assert_eq!(ex.execution_count, Some(3));
        assert!(ex.success());
    }

    /// Deno's order, seen 8 times in 150 runs: reply, idle, then the value.
    #[test]
    fn a_value_after_the_reply_and_idle_still_counts() {
        let mut c = Collector::new(100);
        assert!(!c.value_may_trail(), "not done yet");
        c.take(message(
            "execute_reply",
            json!({"status": "ok", "execution_count": 2, "user_expressions": {}, "payload": []}),
        ));
        c.take(message("status", json!({"execution_state": "idle"})));
        assert!(c.done() && c.value_may_trail());
        c.take(message(
            "execute_result",
            json!({"execution_count": 2, "data": {"text/plain": "42"}, "metadata": {}}),
        ));
        assert!(!c.value_may_trail(), "one value at most");
        assert_eq!(c.execution.text(), Some("42"));
    }

    #[test]
    fn errors_are_data_with_the_users_line() {
        let mut c = Collector::new(100);
        let tb = vec![
            "\u{1b}[31m---------\u{1b}[39m".to_string(),
            "Cell \u{1b}[32mIn[4], line 3\u{1b}[39m\n      1 x = 1\n----> 3 1/0".to_string(),
            "\u{1b}[31mZeroDivisionError\u{1b}[39m: division by zero".to_string(),
        ];
        c.take(message(
            "error",
            json!({"ename": "ZeroDivisionError", "evalue": "division by zero", "traceback": tb}),
        ));
        let e = c.execution.error.unwrap();
        assert_eq!(e.name, "ZeroDivisionError");
        assert_eq!(e.line, Some(3));
        assert!(!e.traceback.contains('\u{1b}'), "{}", e.traceback);
        assert!(e.traceback.contains("ZeroDivisionError: division by zero"));
    }

    #[test]
    fn cuts_keep_whole_characters() {
        assert_eq!(cut_at_char("héllo", 2), "h");
        assert_eq!(strip_ansi("\u{1b}[1;31mred\u{1b}[0m"), "red");
    }
}
