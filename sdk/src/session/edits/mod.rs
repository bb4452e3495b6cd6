//! Whitespace-tolerant text edits, in the shapes coding agents describe file changes.
//!
//! Language models name the text they want to change by quoting it, and their quotes
//! often differ from the file in trailing whitespace, line endings or indentation depth.
//! [`apply_edits`] resolves every [`Edit`] against the original text, refuses edits whose
//! anchor is missing, ambiguous or overlapping another edit with a message that says how
//! to fix the request, and otherwise returns the new text with a record of each change.
//! It does no I/O, so callers decide how the file is read and written.
//!
//! The parts: [`shape`](Edit) (edits as data, in dockhand's and agentick's JSON shapes),
//! `doc` (the original's lines and finding anchors in them), `apply` (turning each edit
//! into splices of the original), `splice` (ordering them, refusing overlaps) and
//! `outcome` ([`EditResult`], [`EditError`]).
//!
//! Each anchor is looked up with three strategies in turn; the first that finds
//! anything wins:
//!
//! 1. the exact text;
//! 2. whole lines, ignoring trailing whitespace;
//! 3. whole lines, ignoring trailing whitespace and a uniform shift of indentation. New
//!    text is then re-indented to the matched block.
//!
//! An edit with `all` uses the exact text only (a rename must not touch look-alikes),
//! changes every match, and is a no-op when nothing matches.
//!
//! `\r\n` line endings, in the file and in the edits, are read as `\n`, and the result
//! is written with `\n`. Deleting text, or replacing it with nothing, removes its line
//! when nothing but whitespace would be left there.
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

/// Characters of a line compared when looking for the closest line; bounds the cost
/// of the edit-distance search on files with very long lines.
const SIMILARITY_MAX_CHARS: usize = 160;
/// Lines shown on each side of the closest line when an anchor is not found.
const CONTEXT_LINES: usize = 2;

const RANGE_FIELDS: &str = "a range edit needs `from`, `to` and `content` \
    (line numbers or text; empty content deletes the block)";
const INSERT_PLACE: &str = "an insert edit needs exactly one of `before`, `after` or `at`";
const AGENTICK_INSERT_CONTENT: &str =
    "an insert edit with `insert: \"before\"|\"after\"|\"start\"|\"end\"` \
    needs `content`, the text to insert";
const AGENTICK_INSERT_ANCHOR: &str =
    "`insert: \"before\"` or `\"after\"` needs `old`, the text to insert next to";
const EMPTY_INSERT: &str = "`insert` is empty; there is nothing to insert";
const EMPTY_ANCHOR: &str = "the anchor is empty; quote the text to match from the file";
const NOTHING_TO_DO: &str = "the edit sets none of `old`, `insert` or `from`/`to`: \
    use {old, new} to replace, {old, delete: true} to delete, {old, insert: \"before\"|\"after\", content} \
    or {insert: \"start\"|\"end\", content} to insert, {from, to, content} for a block";
const OLD_WITHOUT_NEW: &str = "`old` needs `new` (empty removes the text) or `delete: true`";

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
    let text = source.replace("\r\n", "\n");
    let doc = Doc::new(&text);
    let mut splices = Vec::new();
    for (index, edit) in edits.iter().enumerate() {
        let mode = Mode::read(index, edit)?;
        splices.extend(doc.resolve(index, &mode)?);
    }
    let applied = splices.len();
    Ok(doc.build(order_splices(splices)?, applied))
}

fn invalid(edit: usize, reason: impl Into<String>) -> EditError {
    let reason = reason.into();
    EditError::InvalidEdit { edit, reason }
}

mod apply;
mod doc;
mod outcome;
mod shape;
mod splice;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_semantics;
mod text;

pub use crate::error::EditError;
use doc::*;
pub use outcome::{Change, EditResult};
use shape::Mode;
pub use shape::{Edit, InsertAt, RangeBound};
use splice::*;
use text::*;
