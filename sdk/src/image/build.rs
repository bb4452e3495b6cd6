//! Running one image build and turning its log into progress and errors.

use bytes::Bytes;
use futures::{Stream, StreamExt};

use super::build_log;
use crate::engine::{BuildLine, Engine};
use crate::error::Result;
use crate::progress::{Reporter, Stage};

/// Builds `tag` from `context`, reporting each log line, and classifies a failure.
pub(crate) async fn run_build(
    engine: &Engine,
    tag: &str,
    context: impl Stream<Item = std::io::Result<Bytes>> + Send + 'static,
    reporter: &Reporter,
) -> Result<()> {
    let mut log: Vec<String> = Vec::new();
    let mut pending = String::new();
    let mut stream = std::pin::pin!(engine.build_image(tag, context));
    while let Some(item) = stream.next().await {
        match item? {
            BuildLine::Log(text) => {
                pending.push_str(&text);
                while let Some(nl) = pending.find('\n') {
                    let line: String = pending.drain(..=nl).collect();
                    push_line(&mut log, &line, tag, reporter);
                }
            }
            BuildLine::Failed(message) => {
                push_line(&mut log, &pending, tag, reporter);
                return Err(build_log::classify_failure(tag, &message, &log));
            }
        }
    }
    Ok(())
}

fn push_line(log: &mut Vec<String>, raw: &str, tag: &str, reporter: &Reporter) {
    let line = build_log::strip_ansi(raw.trim_end_matches(['\n', '\r']));
    if !line.trim().is_empty() {
        reporter.report(tag, Stage::Build, shortened(&line));
        log.push(line);
    }
}

/// A progress line of at most 300 characters: a `RUN` step that carries a
/// program's packed sources would otherwise fill a screen.
fn shortened(line: &str) -> String {
    const MAX: usize = 300;
    match line.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}… ({} characters)", &line[..cut], line.chars().count()),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn long_progress_lines_are_shortened() {
        assert_eq!(super::shortened("Step 1/3 : FROM x"), "Step 1/3 : FROM x");
        let long = format!("Step 7/9 : RUN {}", "é".repeat(1000));
        let short = super::shortened(&long);
        assert!(short.chars().count() < 340, "{short}");
        assert!(short.ends_with("(1015 characters)"), "{short}");
    }
}
