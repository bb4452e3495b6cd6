//! What applying edits gives back: the new text and its changes, or why
//! nothing was applied.

use serde::{Deserialize, Serialize};

/// The outcome of a successful [`apply_edits`](super::apply_edits).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EditResult {
    /// The new file content.
    pub content: String,
    /// How many replacements were made: an `all` edit counts each match
    /// (and 0 when it matched nothing).
    pub applied: usize,
    /// Every changed region, in file order.
    pub changes: Vec<Change>,
}

/// One changed region of the file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Change {
    /// 1-based line in the original file where the change starts.
    pub line: usize,
    /// The original text that was removed (empty for inserts).
    pub removed: String,
    /// The text put in its place.
    pub added: String,
    /// Lines of the original the change removed (a line cut short counts).
    pub removed_lines: usize,
    /// Lines of text the change added.
    pub added_lines: usize,
}

impl Change {
    pub(super) fn new(line: usize, removed: String, added: String) -> Self {
        let (removed_lines, added_lines) = (count_lines(&removed), count_lines(&added));
        Change {
            line,
            removed,
            added,
            removed_lines,
            added_lines,
        }
    }
}

/// Lines `text` touches: a last line without a break counts.
fn count_lines(text: &str) -> usize {
    text.matches('\n').count() + usize::from(!text.is_empty() && !text.ends_with('\n'))
}
