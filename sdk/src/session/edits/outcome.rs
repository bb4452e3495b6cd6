//! What applying edits gives back: the new text and its changes, or why
//! nothing was applied.

use serde::{Deserialize, Serialize};

use super::*;

/// The outcome of a successful [`apply_edits`].
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

/// Why a set of edits was refused; when this is returned nothing was applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EditError {
    /// An anchor matched nowhere, not even with whitespace tolerance.
    #[error(
        "edit {edit}: {} not found{}; re-read the file to get its current content{}",
        preview(.anchor),
        closest_hint(.closest),
        context_block(.context)
    )]
    NotFound {
        /// Index of the edit in the list.
        edit: usize,
        /// The anchor as given.
        anchor: String,
        /// The most similar non-blank line (1-based number and text), if any.
        closest: Option<(usize, String)>,
        /// The lines around the closest one, numbered, the closest marked `>`.
        context: Vec<String>,
    },
    /// A text range's `to` was not found after its `from`.
    #[error(
        "edit {edit}: `to` {} not found after `from` (which matched line {from_line}); \
         re-read the file, or quote `to` as it appears below `from`",
        preview(.anchor)
    )]
    EndNotFound {
        /// Index of the edit in the list.
        edit: usize,
        /// The `to` anchor as given.
        anchor: String,
        /// The 1-based line where `from` matched.
        from_line: usize,
    },
    /// An anchor matched several places and the edit did not set `all`.
    #[error(
        "edit {edit}: {} matches {matches} places (lines {}); add more context or set all",
        preview(.anchor),
        list_lines(.lines)
    )]
    Ambiguous {
        /// Index of the edit in the list.
        edit: usize,
        /// The anchor as given.
        anchor: String,
        /// How many places matched.
        matches: usize,
        /// The 1-based line where each match starts.
        lines: Vec<usize>,
    },
    /// Two edits change overlapping parts of the original text.
    #[error("{}", overlap_message(.first, .second))]
    Overlap {
        /// Index of the earlier edit in the list.
        first: usize,
        /// Index of the later edit in the list.
        second: usize,
    },
    /// An edit's fields do not describe a valid edit.
    #[error("edit {edit}: {reason}")]
    InvalidEdit {
        /// Index of the edit in the list.
        edit: usize,
        /// What is wrong and how to fix it.
        reason: String,
    },
}
