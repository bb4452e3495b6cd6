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

#[derive(Clone, Copy)]
enum Side {
    Before,
    After,
}

/// A byte range of the original text and what replaces it. `core_*` is the range the
/// edit asked for; `start..end` may widen it by a line break that a deletion swallows,
/// which is given back when it collides with a neighbouring edit.
struct Splice {
    start: usize,
    end: usize,
    core_start: usize,
    core_end: usize,
    text: String,
    edit: usize,
}

impl Splice {
    fn new(edit: usize, start: usize, end: usize, text: String) -> Self {
        let (core_start, core_end) = (start, end);
        Self {
            start,
            end,
            core_start,
            core_end,
            text,
            edit,
        }
    }
}

/// Sorts splices into file order and rejects overlaps, first giving back swallowed
/// line breaks so that deleting neighbouring lines in separate edits works.
fn order_splices(mut splices: Vec<Splice>) -> Result<Vec<Splice>, EditError> {
    // A stable sort keeps inserts at the same position in the order of their edits.
    splices.sort_by_key(|s| (s.start, s.end));
    let mut ordered: Vec<Splice> = Vec::with_capacity(splices.len());
    for mut next in splices {
        if let Some(prev) = ordered.last_mut() {
            if next.start < prev.end {
                if next.start < next.core_start && prev.end <= next.core_start {
                    next.start = prev.end;
                } else if prev.end > prev.core_end && prev.core_end <= next.start {
                    prev.end = next.start;
                } else {
                    let (first, second) = (prev.edit.min(next.edit), prev.edit.max(next.edit));
                    return Err(EditError::Overlap { first, second });
                }
            }
        }
        ordered.push(next);
    }
    Ok(ordered)
}

/// One line of the original: `start..end` is its text without the line break, `next`
/// where the following line starts.
#[derive(Clone, Copy)]
struct Line {
    start: usize,
    end: usize,
    next: usize,
}

/// Where an anchor matched; `indent` is set when it matched with shifted indentation
/// and holds the matched block's own indentation.
struct Found<'s> {
    start: usize,
    end: usize,
    indent: Option<&'s str>,
}

/// An anchor split into lines, trailing whitespace removed, for the line strategies.
struct Pattern<'a> {
    lines: Vec<&'a str>,
    trailing_newline: bool,
}

impl<'a> Pattern<'a> {
    fn new(anchor: &'a str) -> Self {
        let body = anchor.strip_suffix('\n').unwrap_or(anchor);
        let lines = body.split('\n').map(trim_trailing).collect();
        let trailing_newline = body.len() < anchor.len();
        Self {
            lines,
            trailing_newline,
        }
    }
}

/// The original text with its line structure, the base every edit resolves against.
struct Doc<'s> {
    text: &'s str,
    lines: Vec<Line>,
    /// Each line's text without trailing whitespace, for the line strategies.
    trimmed: Vec<&'s str>,
    /// Byte offsets of every `\n`, to turn offsets into line numbers.
    newlines: Vec<usize>,
    crlf: bool,
}

impl<'s> Doc<'s> {
    fn new(text: &'s str) -> Self {
        let (mut lines, mut newlines, mut start) = (Vec::new(), Vec::new(), 0);
        for piece in text.split_inclusive('\n') {
            let next = start + piece.len();
            let end = next - line_break_len(piece);
            if end < next {
                newlines.push(next - 1);
            }
            lines.push(Line { start, end, next });
            start = next;
        }
        let trimmed = lines
            .iter()
            .map(|l| trim_trailing(text.get(l.start..l.end).unwrap_or("")))
            .collect();
        let crlf = text.matches("\r\n").count() * 2 > newlines.len();
        Self {
            text,
            lines,
            trimmed,
            newlines,
            crlf,
        }
    }

    fn eol(&self) -> &'static str {
        if self.crlf {
            "\r\n"
        } else {
            "\n"
        }
    }

    fn slice(&self, start: usize, end: usize) -> &'s str {
        self.text.get(start..end).unwrap_or("")
    }

    fn line_text(&self, line: &Line) -> &'s str {
        self.slice(line.start, line.end)
    }

    /// The line with 1-based `number`, if the file has it.
    fn line(&self, number: usize) -> Option<&Line> {
        self.lines.get(number.checked_sub(1)?)
    }

    fn line_number(&self, pos: usize) -> usize {
        1 + self.newlines.partition_point(|&p| p < pos)
    }

    /// Length of the line break starting at `pos`, 0 if there is none.
    fn break_at(&self, pos: usize) -> usize {
        let rest = self.slice(pos, self.text.len());
        if rest.starts_with("\r\n") {
            2
        } else {
            usize::from(rest.starts_with('\n'))
        }
    }

    /// Where the line break ending just before `pos` starts, or `pos` if there is none.
    fn break_before(&self, pos: usize) -> usize {
        pos - line_break_len(self.slice(0, pos))
    }

    fn ends_with_break(&self, found: &Found<'_>) -> bool {
        self.slice(found.start, found.end).ends_with('\n')
    }

    fn covers_whole_lines(&self, found: &Found<'_>) -> bool {
        let starts_line = found.start == 0 || self.slice(0, found.start).ends_with('\n');
        let ends_line = found.end == self.text.len() || self.break_at(found.end) > 0;
        starts_line && (ends_line || self.ends_with_break(found))
    }

    /// Converts new text to the file's line breaks, re-indenting it first when its
    /// anchor matched with shifted indentation.
    fn prepare(&self, text: &str, indent: Option<&str>) -> String {
        let unix = text.replace("\r\n", "\n");
        let shaped = match indent {
            Some(indent) => reindent(&unix, indent),
            None => unix,
        };
        if self.crlf {
            shaped.replace('\n', "\r\n")
        } else {
            shaped
        }
    }

    fn ensure_break(&self, text: &mut String) {
        if !text.ends_with('\n') {
            text.push_str(self.eol());
        }
    }

    /// Turns one edit into splices of the original, choosing its mode by precedence
    /// range > insert > delete > replace.
    fn resolve(&self, index: usize, edit: &Edit) -> Result<Vec<Splice>, EditError> {
        if edit.from.is_some() || edit.to.is_some() {
            let (Some(from), Some(to), Some(content)) = (edit.from, edit.to, &edit.content) else {
                return Err(invalid(index, RANGE_FIELDS));
            };
            return Ok(vec![self.range(index, from, to, content)?]);
        }
        if let Some(text) = &edit.insert {
            return self.insert(index, edit, text);
        }
        let old = edit
            .old
            .as_deref()
            .ok_or_else(|| invalid(index, NOTHING_TO_DO))?;
        let new = match (edit.delete, &edit.new) {
            (true, _) => None,
            (false, Some(new)) => Some(new),
            (false, None) => return Err(invalid(index, OLD_WITHOUT_NEW)),
        };
        let found = self.matches(index, old, edit.all)?;
        let splice = |f: &Found<'_>| match new {
            Some(new) => Splice::new(index, f.start, f.end, self.prepare(new, f.indent)),
            None => self.delete(index, f),
        };
        Ok(found.iter().map(splice).collect())
    }

    fn insert(&self, index: usize, edit: &Edit, text: &str) -> Result<Vec<Splice>, EditError> {
        if text.is_empty() {
            return Err(invalid(index, EMPTY_INSERT));
        }
        let (anchor, side) = match (&edit.before, &edit.after, edit.at) {
            (None, None, Some(at)) => return Ok(vec![self.insert_at(index, at, text)]),
            (Some(anchor), None, None) => (anchor, Side::Before),
            (None, Some(anchor), None) => (anchor, Side::After),
            _ => return Err(invalid(index, INSERT_PLACE)),
        };
        let found = self.matches(index, anchor, edit.all)?;
        Ok(found
            .iter()
            .map(|f| self.insert_near(index, f, side, text))
            .collect())
    }

    fn range(&self, index: usize, from: usize, to: usize, text: &str) -> Result<Splice, EditError> {
        let (Some(first), Some(last), true) = (self.line(from), self.line(to), from <= to) else {
            return Err(invalid(index, range_problem(from, to, self.lines.len())));
        };
        let mut splice = Splice::new(index, first.start, last.next, String::new());
        let had_break = last.next > last.end;
        if text.is_empty() {
            if !had_break {
                splice.start = self.break_before(first.start);
            }
            return Ok(splice);
        }
        splice.text = self.prepare(text, None);
        if had_break {
            self.ensure_break(&mut splice.text);
        }
        Ok(splice)
    }

    /// Keeps the file's trailing line break, or its absence, when adding at either end.
    fn insert_at(&self, index: usize, at: InsertAt, text: &str) -> Splice {
        let mut body = self.prepare(text, None);
        let pos = match at {
            InsertAt::Start => 0,
            InsertAt::End => self.text.len(),
        };
        if (at == InsertAt::Start && !self.text.is_empty()) || self.text.ends_with('\n') {
            self.ensure_break(&mut body);
        } else if !self.text.is_empty() {
            body.insert_str(0, self.eol());
        }
        Splice::new(index, pos, pos, body)
    }

    /// Whole-line anchors get whole-line inserts; anchors inside a line get the text
    /// spliced in right beside them.
    fn insert_near(&self, index: usize, found: &Found<'_>, side: Side, text: &str) -> Splice {
        let mut body = self.prepare(text, found.indent);
        let whole = self.covers_whole_lines(found);
        let pos = match side {
            Side::Before if whole => {
                self.ensure_break(&mut body);
                found.start
            }
            Side::Before => found.start,
            Side::After if !whole || self.ends_with_break(found) => {
                if whole {
                    self.ensure_break(&mut body);
                }
                found.end
            }
            Side::After => match self.break_at(found.end) {
                0 => {
                    body.insert_str(0, self.eol());
                    found.end
                }
                break_len => {
                    self.ensure_break(&mut body);
                    found.end + break_len
                }
            },
        };
        Splice::new(index, pos, pos, body)
    }

    /// Deleting whole lines also removes their line break, so no blank line is left.
    fn delete(&self, index: usize, found: &Found<'_>) -> Splice {
        let mut splice = Splice::new(index, found.start, found.end, String::new());
        if self.covers_whole_lines(found) && !self.ends_with_break(found) {
            match self.break_at(found.end) {
                0 => splice.start = self.break_before(found.start),
                break_len => splice.end += break_len,
            }
        }
        splice
    }

    /// Finds `anchor` and checks the number of matches against `all`.
    fn matches(&self, index: usize, anchor: &str, all: bool) -> Result<Vec<Found<'s>>, EditError> {
        if anchor.is_empty() {
            return Err(invalid(index, EMPTY_ANCHOR));
        }
        let found = self.find(anchor);
        let anchor = anchor.to_owned();
        if found.is_empty() {
            let closest = self.closest_line(&anchor);
            return Err(EditError::NotFound {
                edit: index,
                anchor,
                closest,
            });
        }
        if all {
            return Ok(non_overlapping(found));
        }
        if found.len() > 1 {
            let (edit, matches) = (index, found.len());
            let lines = found.iter().map(|f| self.line_number(f.start)).collect();
            return Err(EditError::Ambiguous {
                edit,
                anchor,
                matches,
                lines,
            });
        }
        Ok(found)
    }

    /// Every match of the first strategy that finds any. Overlapping matches are all
    /// kept so that ambiguity is never hidden.
    fn find(&self, anchor: &str) -> Vec<Found<'s>> {
        let exact = self.find_exact(anchor);
        if !exact.is_empty() {
            return exact;
        }
        let pattern = Pattern::new(anchor);
        let trimmed = self.find_lines(&pattern, false);
        if !trimmed.is_empty() {
            return trimmed;
        }
        self.find_lines(&pattern, true)
    }

    /// An anchor quoted with `\n` from a CRLF file is still an exact quote.
    fn find_exact(&self, anchor: &str) -> Vec<Found<'s>> {
        let found = occurrences(self.text, anchor);
        if found.is_empty() && self.crlf && anchor.contains('\n') {
            return occurrences(self.text, &self.prepare(anchor, None));
        }
        found
    }

    fn find_lines(&self, pattern: &Pattern<'_>, shifted: bool) -> Vec<Found<'s>> {
        let n = pattern.lines.len();
        let anchor_indent = min_indent(pattern.lines.iter().copied());
        if n == 0 || (shifted && anchor_indent.is_none()) {
            return Vec::new();
        }
        let mut found = Vec::new();
        for (i, texts) in self.trimmed.windows(n).enumerate() {
            let indent = match anchor_indent {
                Some(indent) if shifted => match shifted_match(&pattern.lines, indent, texts) {
                    None => continue,
                    block_indent => block_indent,
                },
                _ if texts == pattern.lines => None,
                _ => continue,
            };
            let (Some(first), Some(last)) = (self.lines.get(i), self.lines.get(i + n - 1)) else {
                continue;
            };
            let end = if pattern.trailing_newline {
                last.next
            } else {
                last.end
            };
            found.push(Found {
                start: first.start,
                end,
                indent,
            });
        }
        found
    }

    /// The non-blank line most similar to the anchor's first non-blank line.
    fn closest_line(&self, anchor: &str) -> Option<(usize, String)> {
        let wanted = anchor.lines().map(str::trim).find(|l| !l.is_empty())?;
        let mut best: Option<(f64, usize, &str)> = None;
        for (i, line) in self.lines.iter().enumerate() {
            let text = self.line_text(line);
            if text.trim().is_empty() {
                continue;
            }
            let score = similarity(wanted, text.trim());
            if best.is_none_or(|(top, _, _)| score > top) {
                best = Some((score, i + 1, text));
            }
        }
        best.map(|(_, number, text)| (number, text.to_owned()))
    }

    fn build(&self, splices: Vec<Splice>, applied: usize) -> EditResult {
        let mut content = String::with_capacity(self.text.len());
        let mut changes = Vec::with_capacity(splices.len());
        let mut cursor = 0;
        for splice in splices {
            content.push_str(self.slice(cursor, splice.start));
            content.push_str(&splice.text);
            let line = self.line_number(splice.core_start);
            let removed = self.slice(splice.start, splice.end).to_owned();
            changes.push(Change {
                line,
                removed,
                added: splice.text,
            });
            cursor = cursor.max(splice.end);
        }
        content.push_str(self.slice(cursor, self.text.len()));
        EditResult {
            content,
            applied,
            changes,
        }
    }
}

/// Length of the line break `text` ends with: 2 for `\r\n`, 1 for `\n`, else 0.
fn line_break_len(text: &str) -> usize {
    if text.ends_with("\r\n") {
        2
    } else {
        usize::from(text.ends_with('\n'))
    }
}

/// Says why `from..=to` names no lines of a file with `count` lines.
fn range_problem(from: usize, to: usize, count: usize) -> String {
    let why = if from == 0 {
        "lines are numbered from 1"
    } else if from > to {
        "`from` is after `to`"
    } else {
        "`to` is past the end of the file"
    };
    let count = plural(count, "line");
    format!("lines {from} to {to} are not a valid range: {why}; the file has {count}")
}

fn occurrences<'s>(text: &'s str, needle: &str) -> Vec<Found<'s>> {
    let Some(first) = needle.chars().next() else {
        return Vec::new();
    };
    let (mut found, mut from) = (Vec::new(), 0);
    while let Some(offset) = text.get(from..).and_then(|rest| rest.find(needle)) {
        let start = from + offset;
        let end = start + needle.len();
        found.push(Found {
            start,
            end,
            indent: None,
        });
        // Step one character, not the whole needle, so overlapping matches count too.
        from = start + first.len_utf8();
    }
    found
}

/// Keeps the first of any overlapping matches, for edits applied at every match.
fn non_overlapping(found: Vec<Found<'_>>) -> Vec<Found<'_>> {
    let mut kept: Vec<Found<'_>> = Vec::with_capacity(found.len());
    for f in found {
        if kept.last().is_none_or(|last| f.start >= last.end) {
            kept.push(f);
        }
    }
    kept
}

/// Compares lines with each side's least indentation removed; on a match returns the
/// indentation of the source block's least-indented line.
fn shifted_match<'s>(anchor: &[&str], anchor_indent: usize, source: &[&'s str]) -> Option<&'s str> {
    let source_indent = min_indent(source.iter().copied())?;
    let same = |(a, s): (&&str, &&str)| match (a.is_empty(), s.is_empty()) {
        (false, false) => a.get(anchor_indent..) == s.get(source_indent..),
        (a_blank, s_blank) => a_blank == s_blank,
    };
    if !anchor.iter().zip(source).all(same) {
        return None;
    }
    let least = source
        .iter()
        .find(|s| !s.is_empty() && indent_len(s) == source_indent)?;
    least.get(..source_indent)
}

/// Moves `text` as a block so its least-indented line starts with `indent`; blank lines
/// become empty.
fn reindent(text: &str, indent: &str) -> String {
    let base = min_indent(text.split('\n').map(trim_trailing)).unwrap_or(0);
    let shift = |line: &str| match trim_trailing(line) {
        "" => String::new(),
        _ => format!("{indent}{}", line.get(base..).unwrap_or(line)),
    };
    text.split('\n').map(shift).collect::<Vec<_>>().join("\n")
}

fn trim_trailing(line: &str) -> &str {
    line.trim_end_matches([' ', '\t', '\r'])
}

fn indent_len(line: &str) -> usize {
    line.len() - line.trim_start_matches([' ', '\t']).len()
}

/// Least indentation among non-empty lines; `None` if every line is empty. Expects
/// lines already stripped of trailing whitespace, so blank lines are empty.
fn min_indent<'a>(lines: impl Iterator<Item = &'a str>) -> Option<usize> {
    lines.filter(|l| !l.is_empty()).map(indent_len).min()
}

/// 1.0 for equal strings down to 0.0 for nothing in common, by edit distance.
fn similarity(a: &str, b: &str) -> f64 {
    let cut = |s: &str| s.chars().take(SIMILARITY_MAX_CHARS).collect::<String>();
    strsim::normalized_levenshtein(&cut(a), &cut(b))
}

fn shorten(text: &str) -> String {
    match text.char_indices().nth(PREVIEW_MAX_CHARS) {
        Some((cut, _)) => format!("{}…", text.get(..cut).unwrap_or(text)),
        None => text.to_owned(),
    }
}

fn plural(count: usize, word: &str) -> String {
    let s = if count == 1 { "" } else { "s" };
    format!("{count} {word}{s}")
}

/// Quotes an anchor for a message: whole if it is one line, else its first non-blank
/// line and a line count.
fn preview(anchor: &str) -> String {
    let body = anchor.strip_suffix('\n').unwrap_or(anchor);
    let count = body.split('\n').count();
    if count <= 1 {
        return format!("`{}`", shorten(trim_trailing(body)));
    }
    let first = body.split('\n').map(str::trim).find(|l| !l.is_empty());
    format!("`{}` ({count} lines)", shorten(first.unwrap_or("")))
}

fn closest_hint(closest: &Option<(usize, String)>) -> String {
    match closest {
        Some((line, text)) => format!("; closest line {line}: `{}`", shorten(text)),
        None => "; no similar line in the file".to_owned(),
    }
}

fn list_lines(lines: &[usize]) -> String {
    let listed = lines.iter().take(MAX_LISTED_LINES).map(usize::to_string);
    let more = (lines.len() > MAX_LISTED_LINES).then(|| "…".to_owned());
    listed.chain(more).collect::<Vec<_>>().join(", ")
}

fn overlap_message(first: &usize, second: &usize) -> String {
    if first == second {
        return format!("edit {first}: its matches overlap each other; quote a longer anchor");
    }
    format!(
        "edits {first} and {second} overlap: both change the same text; \
         combine them into one edit or anchor them on different text"
    )
}

#[cfg(test)]
mod tests {
    use super::InsertAt::{End, Start};
    use super::*;

    fn check(source: &str, edits: &[Edit], expected: &str) {
        match apply_edits(source, edits) {
            Ok(result) => assert_eq!(result.content, expected, "source: {source:?}"),
            Err(e) => panic!("edits failed on {source:?}: {e}"),
        }
    }

    fn fail(source: &str, edits: &[Edit]) -> EditError {
        match apply_edits(source, edits) {
            Ok(result) => panic!("edits unexpectedly applied: {:?}", result.content),
            Err(e) => e,
        }
    }

    fn reason(source: &str, edit: Edit) -> String {
        match fail(source, &[Edit::insert_at(Start, "ok"), edit]) {
            EditError::InvalidEdit { edit: 1, reason } => reason,
            other => panic!("unexpected error {other:?}"),
        }
    }

    #[test]
    fn replace_single_match() {
        let (source, fixed) = ("def f(a, b):\n    a - b\n", "def f(a, b):\n    a + b\n");
        check(source, &[Edit::replace("a - b", "a + b")], fixed);
        check("a\nb\nc\n", &[Edit::replace("b", "")], "a\n\nc\n");
    }

    #[test]
    fn replace_all_counts_once_and_records_each_change() {
        let edits = [Edit::replace("a", "c").all(), Edit::insert_at(End, "d")];
        let result = apply_edits("a\nb\na\n", &edits).unwrap();
        assert_eq!(
            (result.content.as_str(), result.applied),
            ("c\nb\nc\nd\n", 2)
        );
        let change = |line, removed: &str, added: &str| {
            let (removed, added) = (removed.to_owned(), added.to_owned());
            Change {
                line,
                removed,
                added,
            }
        };
        let expected = [
            change(1, "a", "c"),
            change(3, "a", "c"),
            change(4, "", "d\n"),
        ];
        assert_eq!(result.changes, expected);
    }

    #[test]
    fn edits_resolve_against_the_original() {
        let swap = [Edit::replace("a", "b"), Edit::replace("b", "c")];
        check("a b", &swap, "b c");
        check("a\n", &[], "a\n");
    }

    #[test]
    fn ambiguous_lists_lines() {
        let source = "x = 1\ny\nx = 1\nz\nx = 1\n";
        let e = fail(source, &[Edit::replace("x = 1", "x = 2")]);
        let lines = vec![1, 3, 5];
        let anchor = "x = 1".to_owned();
        assert_eq!(
            e,
            EditError::Ambiguous {
                edit: 0,
                anchor,
                matches: 3,
                lines
            }
        );
        let expected = "edit 0: `x = 1` matches 3 places (lines 1, 3, 5); \
                        add more context or set all";
        assert_eq!(e.to_string(), expected);
        let e = fail("===", &[Edit::replace("==", "!=")]);
        assert!(e.to_string().contains("matches 2 places (lines 1, 1)"));
        check("===", &[Edit::replace("==", "!").all()], "!=");
    }

    #[test]
    fn delete_whole_lines_takes_their_line_break() {
        check("a\nb\nc\n", &[Edit::delete("b")], "a\nc\n");
        check("a\nb\na\n", &[Edit::delete("a").all()], "b\n");
        check("a", &[Edit::delete("a")], "");
        // The last line has no break of its own, so the one before it goes.
        check("a\nb", &[Edit::delete("b")], "a");
        check("a\nb\nc", &[Edit::delete("b\nc")], "a");
        // An anchor that ends with a break already took it; the blank line stays.
        check("a\nb\n\nc\n", &[Edit::delete("b\n")], "a\n\nc\n");
    }

    #[test]
    fn delete_mid_line() {
        let source = "let x = 1; // note\n";
        check(source, &[Edit::delete(" // note")], "let x = 1;\n");
    }

    #[test]
    fn deleting_neighbouring_lines_in_separate_edits() {
        check("x\na\nb", &[Edit::delete("a"), Edit::delete("b")], "x\n");
        check("a\nb", &[Edit::delete("b"), Edit::delete("a")], "");
        check("a\nb\nc\n", &[Edit::delete("a"), Edit::delete("b")], "c\n");
    }

    #[test]
    fn insert_next_to_whole_lines() {
        check("a\nb\n", &[Edit::insert_after("a", "x")], "a\nx\nb\n");
        check("a\nb\n", &[Edit::insert_after("a\n", "x\n")], "a\nx\nb\n");
        check("a\nb", &[Edit::insert_after("b", "c")], "a\nb\nc");
        check("a\nb\n", &[Edit::insert_before("b", "x")], "a\nx\nb\n");
        check("a\nb\n", &[Edit::insert_before("a\nb", "x")], "x\na\nb\n");
    }

    #[test]
    fn insert_inside_a_line_is_raw() {
        check("x = 1;\n", &[Edit::insert_before("1", "-")], "x = -1;\n");
        check("foo(a)\n", &[Edit::insert_after("a)", ";")], "foo(a);\n");
    }

    #[test]
    fn insert_after_every_match() {
        let edit = Edit::insert_after("x", "y");
        check("x\na\nx\n", &[edit.clone().all()], "x\ny\na\nx\ny\n");
        let e = fail("x\nx\n", &[edit]);
        assert!(matches!(e, EditError::Ambiguous { matches: 2, .. }));
    }

    #[test]
    fn insert_at_start_and_end() {
        check("a\n", &[Edit::insert_at(Start, "x")], "x\na\n");
        check("a\n", &[Edit::insert_at(End, "x")], "a\nx\n");
        check("a", &[Edit::insert_at(End, "x")], "a\nx");
        check("", &[Edit::insert_at(Start, "x")], "x");
        check("", &[Edit::insert_at(End, "x\n")], "x\n");
    }

    #[test]
    fn same_position_inserts_keep_edit_order() {
        let x = Edit::insert_before("b", "x");
        let y = Edit::insert_after("a", "y");
        let z = Edit::insert_before("b", "z");
        check("a\nb\n", &[x, y, z], "a\nx\ny\nz\nb\n");
    }

    #[test]
    fn range_replaces_lines() {
        check("1\n2\n3\n4\n", &[Edit::range(2, 3, "x")], "1\nx\n4\n");
        check("1\n2\n3\n4\n", &[Edit::range(1, 4, "x\ny\n")], "x\ny\n");
        check("1\n2\n3", &[Edit::range(3, 3, "x")], "1\n2\nx");
    }

    #[test]
    fn range_with_empty_content_deletes_lines() {
        check("1\n2\n3\n4\n", &[Edit::range(2, 3, "")], "1\n4\n");
        check("1\n2\n3", &[Edit::range(2, 3, "")], "1");
        check("1\n", &[Edit::range(1, 1, "")], "");
    }

    #[test]
    fn range_bounds_are_checked() {
        assert!(reason("a\n", Edit::range(0, 1, "x")).contains("numbered from 1"));
        let backwards = reason("a\nb\nc\n", Edit::range(3, 2, "x"));
        assert!(backwards.contains("`from` is after `to`"));
        let past_end = reason("a\nb\nc\nd\n", Edit::range(2, 5, "x"));
        let expected = "lines 2 to 5 are not a valid range: \
                        `to` is past the end of the file; the file has 4 lines";
        assert_eq!(past_end, expected);
        assert!(reason("", Edit::range(1, 1, "x")).ends_with("the file has 0 lines"));
        let to = Some(1);
        assert_eq!(
            reason(
                "a\n",
                Edit {
                    to,
                    ..Edit::default()
                }
            ),
            RANGE_FIELDS
        );
        let (from, content) = (to, None);
        assert_eq!(
            reason(
                "a\n",
                Edit {
                    from,
                    content,
                    ..Edit::range(1, 1, "x")
                }
            ),
            RANGE_FIELDS
        );
    }

    #[test]
    fn exact_match_wins_over_looser_strategies() {
        // Ignoring trailing whitespace would also match lines 1-2: ambiguous.
        check("a \nb\na\nb\n", &[Edit::replace("a\nb", "X")], "a \nb\nX\n");
    }

    #[test]
    fn trailing_whitespace_is_ignored() {
        let edit = Edit::replace("a = 1\nb = 2", "a = 10\nb = 20");
        check("a = 1   \nb = 2\t\nc\n", &[edit], "a = 10\nb = 20\nc\n");
        check("x\ny\nz\n", &[Edit::replace("x  \ny\t", "w")], "w\nz\n");
        check("x\ny\nz\n", &[Edit::delete("x  \ny \n")], "z\n");
    }

    #[test]
    fn shifted_indentation_reindents_replacement() {
        let source = "class A:\n    def f(self):\n        x = 1\n        return x\n";
        let old = "def f(self):\n    x = 1\n    return x";
        let new = "def f(self):\n    x = 2\n  \n    return x * 2";
        let expected = "class A:\n    def f(self):\n        x = 2\n\n        return x * 2\n";
        check(source, &[Edit::replace(old, new)], expected);
    }

    #[test]
    fn deeper_anchor_indentation_matches_shallower_source() {
        let source = "fn a() {\n    let x = 1;\n    let y = 2;\n}\n";
        let old = "        let x = 1;\n        let y = 2;";
        let new = "        let x = 10;\n          let y = 20;";
        let expected = "fn a() {\n    let x = 10;\n      let y = 20;\n}\n";
        check(source, &[Edit::replace(old, new)], expected);
    }

    #[test]
    fn shifted_indentation_keeps_the_source_indent_string() {
        let source = "func f() {\n\tif x {\n\t\ty()\n\t}\n}\n";
        let edit = Edit::replace("if x {\n\ty()\n}", "if x {\n\tz()\n}");
        check(source, &[edit], "func f() {\n\tif x {\n\t\tz()\n\t}\n}\n");
    }

    #[test]
    fn shifted_indentation_reindents_inserts() {
        let source = "fn main() {\n    let a = 1;\n    let b = 2;\n}\n";
        let anchor = "let a = 1;\nlet b = 2;";
        let expected = "fn main() {\n    let a = 1;\n    let b = 2;\n    let c = 3;\n}\n";
        check(
            source,
            &[Edit::insert_after(anchor, "let c = 3;")],
            expected,
        );
        let expected = "fn main() {\n    // setup\n    let a = 1;\n    let b = 2;\n}\n";
        check(
            source,
            &[Edit::insert_before(anchor, "// setup\n")],
            expected,
        );
    }

    #[test]
    fn shifted_matches_can_be_ambiguous() {
        let source = "  a\n  b\n    a\n    b\n";
        let e = fail(source, &[Edit::replace("a\nb", "c")]);
        let expected = "edit 0: `a` (2 lines) matches 2 places (lines 1, 3); \
                        add more context or set all";
        assert_eq!(e.to_string(), expected);
        check(source, &[Edit::replace("a\nb", "c").all()], "  c\n    c\n");
    }

    #[test]
    fn edits_on_one_region_overlap() {
        let edits = [Edit::replace("hello world", "hi"), Edit::delete("world")];
        let e = fail("hello world\n", &edits);
        let expected = "edits 0 and 1 overlap: both change the same text; \
                        combine them into one edit or anchor them on different text";
        assert_eq!(e.to_string(), expected);
        let edits = [Edit::insert_after("a", "1"), Edit::replace("abc", "X")];
        assert!(matches!(fail("abc", &edits), EditError::Overlap { .. }));
    }

    #[test]
    fn adjacent_edits_do_not_overlap() {
        let edits = [Edit::replace("def", "2"), Edit::replace("abc", "1")];
        check("abcdef", &edits, "12");
        let edits = [Edit::replace("abc", "X"), Edit::insert_after("abc", "!")];
        check("abc;", &edits, "X!;");
    }

    #[test]
    fn not_found_names_the_closest_line() {
        let e = fail(
            "fn main() {\n    fo();\n}\n",
            &[Edit::replace("foo()", "x")],
        );
        let closest = Some((2, "    fo();".to_owned()));
        let anchor = "foo()".to_owned();
        assert_eq!(
            e,
            EditError::NotFound {
                edit: 0,
                anchor,
                closest
            }
        );
        let expected = "edit 0: `foo()` not found; closest line 2: `    fo();`";
        assert_eq!(e.to_string(), expected);
    }

    #[test]
    fn not_found_in_an_empty_file_has_no_closest_line() {
        let e = fail("", &[Edit::insert_after("x", "y")]);
        let anchor = "x".to_owned();
        assert_eq!(
            e,
            EditError::NotFound {
                edit: 0,
                anchor,
                closest: None
            }
        );
        assert!(e.to_string().contains("not found"));
    }

    #[test]
    fn a_bad_edit_applies_nothing() {
        let source = String::from("a\nb\nc\n");
        let good = [Edit::replace("a", "x"), Edit::delete("c")];
        let edits = [good[0].clone(), Edit::replace("zz", "y"), good[1].clone()];
        assert!(matches!(
            fail(&source, &edits),
            EditError::NotFound { edit: 1, .. }
        ));
        assert_eq!(source, "a\nb\nc\n");
        check(&source, &good, "x\nb\n");
    }

    #[test]
    fn crlf_files_keep_crlf() {
        let source = "a\r\nb\r\nc\r\n";
        let expected = "x\r\ny\r\nz\r\nc\r\n";
        check(source, &[Edit::replace("a\nb", "x\ny\nz")], expected);
        check(source, &[Edit::delete("b")], "a\r\nc\r\n");
        check(
            source,
            &[Edit::insert_after("a", "n")],
            "a\r\nn\r\nb\r\nc\r\n",
        );
        check(source, &[Edit::range(2, 2, "p\nq")], "a\r\np\r\nq\r\nc\r\n");
        check("a\r\nb", &[Edit::insert_at(End, "x")], "a\r\nb\r\nx");
        check("a\r\nb", &[Edit::delete("b")], "a");
        let edit = Edit::replace("  a\n  b", "  c\n  d");
        check("  a  \r\n  b\r\n", &[edit], "  c\r\n  d\r\n");
    }

    #[test]
    fn unicode_is_sliced_on_char_boundaries() {
        let source = "café ☕\n日本語テキスト\n🎉 party\n";
        let edits = [
            Edit::replace("日本語", "中文"),
            Edit::delete("🎉 "),
            Edit::insert_after("café", " au lait"),
        ];
        check(source, &edits, "café au lait ☕\n中文テキスト\nparty\n");
        let e = fail(source, &[Edit::replace("日本誤テキスト", "x")]);
        assert!(e.to_string().ends_with("closest line 2: `日本語テキスト`"));
        check("ééé", &[Edit::replace("éé", "e").all()], "eé");
        let long = fail("x", &[Edit::delete("é".repeat(100))]).to_string();
        assert!(long.contains(&format!("`{}…` not found", "é".repeat(80))));
    }

    #[test]
    fn edits_deserialize_from_json() {
        let cases = [
            (r#"{"old":"a","new":"b"}"#, Edit::replace("a", "b")),
            (
                r#"{"old":"a","new":"","all":true}"#,
                Edit::replace("a", "").all(),
            ),
            (
                r#"{"insert":"x","after":"a"}"#,
                Edit::insert_after("a", "x"),
            ),
            (r#"{"from":2,"to":3,"content":"z"}"#, Edit::range(2, 3, "z")),
            (r#"{"old":"a","delete":true}"#, Edit::delete("a")),
            (r#"{"insert":"x","at":"end"}"#, Edit::insert_at(End, "x")),
        ];
        for (json, edit) in cases {
            assert_eq!(serde_json::from_str::<Edit>(json).unwrap(), edit, "{json}");
            let round_trip = serde_json::to_string(&edit).unwrap();
            assert_eq!(serde_json::from_str::<Edit>(&round_trip).unwrap(), edit);
        }
    }

    #[test]
    fn mode_precedence() {
        let (old, new) = (Some("zz".to_owned()), Some("q".to_owned()));
        let range = Edit {
            old: old.clone(),
            ..Edit::range(1, 1, "z")
        };
        check("a\nb\n", &[range], "z\nb\n");
        let insert = Edit {
            old,
            delete: true,
            ..Edit::insert_after("a", "x")
        };
        check("a\nb\n", &[insert], "a\nx\nb\n");
        check(
            "a\nb\n",
            &[Edit {
                new,
                ..Edit::delete("a")
            }],
            "b\n",
        );
    }

    #[test]
    fn invalid_edits_are_explained() {
        assert_eq!(reason("a\n", Edit::default()), NOTHING_TO_DO);
        let old = Some("a".to_owned());
        assert_eq!(
            reason(
                "a\n",
                Edit {
                    old,
                    ..Edit::default()
                }
            ),
            OLD_WITHOUT_NEW
        );
        assert_eq!(reason("a\n", Edit::replace("", "x")), EMPTY_ANCHOR);
        assert_eq!(reason("a\n", Edit::delete("")), EMPTY_ANCHOR);
        assert_eq!(reason("a\n", Edit::insert_before("", "x")), EMPTY_ANCHOR);
        assert_eq!(reason("a\n", Edit::insert_after("a", "")), EMPTY_INSERT);
        assert_eq!(reason("a\n", Edit::insert("x")), INSERT_PLACE);
        let at = Some(End);
        let two_places = Edit {
            at,
            ..Edit::insert_after("a", "x")
        };
        assert_eq!(reason("a\n", two_places), INSERT_PLACE);
        let e = fail("a\n", &[Edit::insert("x")]);
        assert_eq!(e.to_string(), format!("edit 0: {INSERT_PLACE}"));
    }

    #[test]
    fn arbitrary_input_never_panics() {
        const PIECES: [&str; 12] = [
            "a", "b", " ", "\t", "\n", "\r\n", "\r", "é", "🎉", "中", "  x", "\n\n",
        ];
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move |bound: usize| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            (state >> 33) as usize % bound
        };
        let text = |max: usize, next: &mut dyn FnMut(usize) -> usize| -> String {
            (0..next(max)).map(|_| PIECES[next(PIECES.len())]).collect()
        };
        for _ in 0..3000 {
            let source = text(12, &mut next);
            let mut edits = Vec::new();
            for _ in 0..next(4) {
                let (a, b) = (text(4, &mut next), text(4, &mut next));
                let edit = match next(8) {
                    0 => Edit::replace(a, b),
                    1 => Edit::delete(a),
                    2 => Edit::insert_before(a, b),
                    3 => Edit::insert_after(a, b),
                    4 => Edit::insert_at(Start, b),
                    5 => Edit::insert_at(End, b),
                    6 => Edit::range(next(5), next(5), b),
                    _ => Edit {
                        from: Some(next(3)),
                        ..Edit::delete(a)
                    },
                };
                edits.push(if next(3) == 0 { edit.all() } else { edit });
            }
            if let Ok(result) = apply_edits(&source, &edits) {
                assert_eq!(result.applied, edits.len());
            }
        }
    }
}
