//! Whitespace-tolerant text edits, in the shape coding agents describe file changes.
//!
//! Language models name the text they want to change by quoting it, and their quotes
//! often differ from the file in trailing whitespace, line endings or indentation depth.
//! [`apply_edits`] resolves every [`Edit`] against the original text, refuses edits whose
//! anchor is missing, ambiguous or overlapping another edit with a message that says how
//! to fix the request, and otherwise returns the new text with a record of each change.
//! It does no I/O, so callers decide how the file is read and written.
//!
//! Each anchor is looked up with three strategies in turn; the first that finds
//! anything wins:
//!
//! 1. the exact bytes;
//! 2. whole lines, ignoring trailing whitespace (and `\r`);
//! 3. whole lines, ignoring trailing whitespace and a uniform shift of indentation. New
//!    text is then re-indented to the matched block.
//!
//! Files that mostly end lines with `\r\n` keep doing so: new text written with `\n` is
//! converted.
//!
//! ```
//! use dockhand::session::edits::{apply_edits, Edit};
//!
//! let source = "def greet():\n    if True:\n        print('hi')\n";
//! // Quoted without the function's indentation: still found, and the
//! // replacement is indented to match the file.
//! let edit = Edit::replace(
//!     "if True:\n    print('hi')",
//!     "if True:\n    print('hello')\n    return",
//! );
//! let result = apply_edits(source, &[edit])?;
//! assert_eq!(
//!     result.content,
//!     "def greet():\n    if True:\n        print('hello')\n        return\n"
//! );
//! assert_eq!(result.applied, 1);
//! # Ok::<(), dockhand::session::edits::EditError>(())
//! ```

use serde::{Deserialize, Serialize};

/// Characters of a line compared when looking for the closest line; bounds the cost
/// of the edit-distance search on files with very long lines.
const SIMILARITY_MAX_CHARS: usize = 160;
/// Characters of quoted text shown in an error message before it is cut short.
const PREVIEW_MAX_CHARS: usize = 80;
/// Match lines listed in an ambiguity message before the list is cut short.
const MAX_LISTED_LINES: usize = 10;

const RANGE_FIELDS: &str = "a range edit needs `from`, `to` and `content`";
const INSERT_PLACE: &str = "an insert edit needs exactly one of `before`, `after` or `at`";
const EMPTY_INSERT: &str = "`insert` is empty; there is nothing to insert";
const EMPTY_ANCHOR: &str = "the anchor is empty; quote the text to match from the file";
const NOTHING_TO_DO: &str = "the edit sets none of `old`, `insert` or `from`/`to`";
const OLD_WITHOUT_NEW: &str = "`old` needs `new` (empty removes the text) or `delete: true`";

/// One change to a file. Which mode it is depends on which fields are present, with
/// precedence range > insert > delete > replace:
///
/// - **range**: `from`, `to` and `content` replace whole lines by number;
/// - **insert**: `insert` plus exactly one of `before`, `after` or `at`;
/// - **delete**: `delete: true` with `old`;
/// - **replace**: `old` with `new`.
///
/// Missing fields deserialize to their defaults, so `{"old":"a","new":"b"}` is a
/// complete replace edit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Edit {
    /// Anchor text to replace or delete.
    pub old: Option<String>,
    /// Replacement for `old`; an empty string removes the text.
    pub new: Option<String>,
    /// Change every match instead of requiring exactly one.
    pub all: bool,
    /// Delete `old`, together with its line break when it spans whole lines.
    pub delete: bool,
    /// Text to insert (insert mode).
    pub insert: Option<String>,
    /// Insert before this anchor.
    pub before: Option<String>,
    /// Insert after this anchor.
    pub after: Option<String>,
    /// Insert at the start or end of the file.
    pub at: Option<InsertAt>,
    /// Range mode: first line to replace, 1-based, inclusive.
    pub from: Option<usize>,
    /// Range mode: last line to replace, 1-based, inclusive.
    pub to: Option<usize>,
    /// Range mode: replacement for lines `from..=to`; empty deletes them.
    pub content: Option<String>,
}

/// Where an anchorless insert goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InsertAt {
    /// Before the first line of the file.
    Start,
    /// After the last line of the file.
    End,
}

impl Edit {
    /// Replaces the single match of `old` with `new`.
    pub fn replace(old: impl Into<String>, new: impl Into<String>) -> Self {
        Self {
            old: Some(old.into()),
            new: Some(new.into()),
            ..Self::default()
        }
    }

    /// Applies the edit at every match of its anchor instead of requiring exactly one.
    #[must_use]
    pub fn all(mut self) -> Self {
        self.all = true;
        self
    }

    /// Deletes the single match of `old`, with its line break if it spans whole lines.
    pub fn delete(old: impl Into<String>) -> Self {
        Self {
            old: Some(old.into()),
            delete: true,
            ..Self::default()
        }
    }

    /// Inserts `text` before the single match of `anchor`.
    pub fn insert_before(anchor: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            before: Some(anchor.into()),
            ..Self::insert(text)
        }
    }

    /// Inserts `text` after the single match of `anchor`.
    pub fn insert_after(anchor: impl Into<String>, text: impl Into<String>) -> Self {
        Self {
            after: Some(anchor.into()),
            ..Self::insert(text)
        }
    }

    /// Inserts `text` at the start or end of the file.
    pub fn insert_at(at: InsertAt, text: impl Into<String>) -> Self {
        Self {
            at: Some(at),
            ..Self::insert(text)
        }
    }

    /// Replaces lines `from..=to` (1-based, inclusive) with `content`.
    pub fn range(from: usize, to: usize, content: impl Into<String>) -> Self {
        Self {
            from: Some(from),
            to: Some(to),
            content: Some(content.into()),
            ..Self::default()
        }
    }

    fn insert(text: impl Into<String>) -> Self {
        Self {
            insert: Some(text.into()),
            ..Self::default()
        }
    }
}

/// The outcome of a successful [`apply_edits`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct EditResult {
    /// The new file content.
    pub content: String,
    /// How many edits were applied; an `all` edit counts once.
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
}

/// Why a set of edits was refused; when this is returned nothing was applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// An anchor matched nowhere, not even with whitespace tolerance.
    #[error("edit {edit}: {} not found{}", preview(.anchor), closest_hint(.closest))]
    NotFound {
        /// Index of the edit in the list.
        edit: usize,
        /// The anchor as given.
        anchor: String,
        /// The most similar non-blank line (1-based number and text), if any.
        closest: Option<(usize, String)>,
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

/// Applies `edits` to `source`, all or none.
///
/// Every edit is resolved against the original `source`, never against another edit's
/// result, so edits must not overlap. See the [module documentation](self) for how
/// anchors are matched.
///
/// # Errors
///
/// An [`EditError`] if an edit is malformed, its anchor is missing or ambiguous, or two
/// edits overlap; nothing is applied then.
pub fn apply_edits(source: &str, edits: &[Edit]) -> Result<EditResult, EditError> {
    let doc = Doc::new(source);
    let mut splices = Vec::new();
    for (index, edit) in edits.iter().enumerate() {
        splices.extend(doc.resolve(index, edit)?);
    }
    Ok(doc.build(order_splices(splices)?, edits.len()))
}

fn invalid(edit: usize, reason: impl Into<String>) -> EditError {
    let reason = reason.into();
    EditError::InvalidEdit { edit, reason }
}

mod doc;
mod splice;
#[cfg(test)]
mod tests;
mod text;

use doc::*;
use splice::*;
use text::*;
