//! What an edit looks like as data, in either accepted shape, and reading it
//! into one [`Mode`].

use serde::{Deserialize, Serialize};

use super::*;

/// One change to a file. Two JSON shapes are accepted, so a model prompted
/// with either works; which mode an edit is depends on the fields present,
/// with precedence range > insert > delete > replace:
///
/// | mode | dockhand's shape | agentick's shape |
/// | --- | --- | --- |
/// | replace | `{old, new, all?}` | the same |
/// | delete | `{old, delete: true, all?}` | the same |
/// | insert by an anchor | `{insert: text, before \| after: anchor, all?}` | `{old: anchor, insert: "before" \| "after", content, all?}` |
/// | insert at an end | `{insert: text, at: "start" \| "end"}` | `{insert: "start" \| "end", content}` |
/// | range | `{from: line, to: line, content}` (1-based, inclusive) | `{from: text, to: text, content}` |
///
/// `old_string`, `new_string` and `replace_all` are read as `old`, `new` and
/// `all`. Missing fields deserialize to their defaults, so
/// `{"old":"a","new":"b"}` is a complete replace edit.
///
/// ```
/// use dockhand::session::edits::{apply_edits, Edit};
/// let edits: Vec<Edit> = serde_json::from_str(r#"[
///     {"old": "print('a')", "insert": "after", "content": "print('b')"},
///     {"from": "def old():", "to": "    return 1", "content": "def new():\n    return 2"}
/// ]"#).unwrap();
/// let source = "print('a')\ndef old():\n    return 1\n";
/// let result = apply_edits(source, &edits).unwrap();
/// assert_eq!(result.content, "print('a')\nprint('b')\ndef new():\n    return 2\n");
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Edit {
    /// Anchor text to replace or delete (or, in agentick's insert shape, to insert next to).
    #[serde(alias = "old_string", skip_serializing_if = "Option::is_none")]
    pub old: Option<String>,
    /// Replacement for `old`; an empty string removes the text.
    #[serde(alias = "new_string", skip_serializing_if = "Option::is_none")]
    pub new: Option<String>,
    /// Change every exact match instead of requiring exactly one; no match is
    /// then not an error but a no-op.
    #[serde(alias = "replace_all", skip_serializing_if = "std::ops::Not::not")]
    pub all: bool,
    /// Delete `old`; when that empties its line, the line goes too.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub delete: bool,
    /// Text to insert (dockhand's shape), or where to insert `content`:
    /// `"before"`, `"after"`, `"start"` or `"end"` (agentick's shape).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub insert: Option<String>,
    /// Insert before this anchor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// Insert after this anchor.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// Insert at the start or end of the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<InsertAt>,
    /// Range mode: where the replaced block starts, a 1-based line or text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<RangeBound>,
    /// Range mode: where it ends (inclusive), a 1-based line or text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<RangeBound>,
    /// Range mode: the replacement (empty deletes the block); agentick's
    /// insert shape: the text to insert.
    #[serde(skip_serializing_if = "Option::is_none")]
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

/// One end of a range edit: a line number (1-based) or text found in the
/// file. Line-number ranges replace whole lines; text ranges replace from
/// the start of `from`'s match to the end of the first match of `to` after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RangeBound {
    /// A 1-based line number.
    Line(usize),
    /// Text to find (whitespace-tolerant, as every anchor).
    Text(String),
}

impl From<usize> for RangeBound {
    fn from(line: usize) -> Self {
        RangeBound::Line(line)
    }
}

impl From<&str> for RangeBound {
    fn from(text: &str) -> Self {
        RangeBound::Text(text.to_owned())
    }
}

impl From<String> for RangeBound {
    fn from(text: String) -> Self {
        RangeBound::Text(text)
    }
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

    /// Applies the edit at every exact match of its anchor instead of
    /// requiring exactly one; no match is then a no-op.
    #[must_use]
    pub fn all(mut self) -> Self {
        self.all = true;
        self
    }

    /// Deletes the single match of `old`, and its line when that leaves the line empty.
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
        Self::between(from, to, content)
    }

    /// Replaces a block from `from` through `to`, each a line number or
    /// text: with text, from the start of `from`'s match through the end of
    /// the first match of `to` after it.
    pub fn between(
        from: impl Into<RangeBound>,
        to: impl Into<RangeBound>,
        content: impl Into<String>,
    ) -> Self {
        Self {
            from: Some(from.into()),
            to: Some(to.into()),
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

/// An edit read into the one thing it does, its text in LF line endings.
pub(super) enum Mode {
    Replace {
        old: String,
        new: String,
        all: bool,
    },
    Delete {
        old: String,
        all: bool,
    },
    InsertNear {
        anchor: String,
        side: Side,
        text: String,
        all: bool,
    },
    InsertAt {
        at: InsertAt,
        text: String,
    },
    Range {
        from: RangeBound,
        to: RangeBound,
        content: String,
    },
}

fn lf(text: &str) -> String {
    text.replace("\r\n", "\n")
}

fn bound_lf(bound: &RangeBound) -> RangeBound {
    match bound {
        RangeBound::Text(text) => RangeBound::Text(lf(text)),
        line => line.clone(),
    }
}

/// agentick's insert shape: `insert` names a place and `content` holds the text.
fn agentick_place(edit: &Edit) -> Option<&str> {
    let place = edit.insert.as_deref()?;
    let named = matches!(place, "before" | "after" | "start" | "end");
    let ours = edit.before.is_some() || edit.after.is_some() || edit.at.is_some();
    (named && !ours && (edit.content.is_some() || edit.old.is_some())).then_some(place)
}

impl Mode {
    pub(super) fn read(index: usize, edit: &Edit) -> Result<Mode, EditError> {
        let bad = |reason: &str| Err(invalid(index, reason));
        if edit.from.is_some() || edit.to.is_some() {
            let (Some(from), Some(to), Some(content)) = (&edit.from, &edit.to, &edit.content)
            else {
                return bad(RANGE_FIELDS);
            };
            let (from, to) = (bound_lf(from), bound_lf(to));
            for bound in [&from, &to] {
                if matches!(bound, RangeBound::Text(t) if t.is_empty()) {
                    return bad(EMPTY_ANCHOR);
                }
            }
            let content = lf(content);
            return Ok(Mode::Range { from, to, content });
        }
        if let Some(place) = agentick_place(edit) {
            let Some(text) = edit.content.as_deref().map(lf) else {
                return bad(AGENTICK_INSERT_CONTENT);
            };
            if text.is_empty() {
                return bad(EMPTY_INSERT);
            }
            let at = match place {
                "start" => Some(InsertAt::Start),
                "end" => Some(InsertAt::End),
                _ => None,
            };
            if let Some(at) = at {
                return Ok(Mode::InsertAt { at, text });
            }
            let anchor = match edit.old.as_deref() {
                Some(old) if !old.is_empty() => lf(old),
                _ => return bad(AGENTICK_INSERT_ANCHOR),
            };
            let side = if place == "before" {
                Side::Before
            } else {
                Side::After
            };
            let all = edit.all;
            return Ok(Mode::InsertNear {
                anchor,
                side,
                text,
                all,
            });
        }
        if let Some(text) = &edit.insert {
            if text.is_empty() {
                return bad(EMPTY_INSERT);
            }
            let text = lf(text);
            let all = edit.all;
            return match (&edit.before, &edit.after, edit.at) {
                (None, None, Some(at)) => Ok(Mode::InsertAt { at, text }),
                (Some(anchor), None, None) => {
                    let (anchor, side) = (lf(anchor), Side::Before);
                    Ok(Mode::InsertNear {
                        anchor,
                        side,
                        text,
                        all,
                    })
                }
                (None, Some(anchor), None) => {
                    let (anchor, side) = (lf(anchor), Side::After);
                    Ok(Mode::InsertNear {
                        anchor,
                        side,
                        text,
                        all,
                    })
                }
                _ => bad(INSERT_PLACE),
            };
        }
        let Some(old) = edit.old.as_deref().map(lf) else {
            return bad(NOTHING_TO_DO);
        };
        if old.is_empty() {
            return bad(EMPTY_ANCHOR);
        }
        let all = edit.all;
        match (edit.delete, &edit.new) {
            (true, _) => Ok(Mode::Delete { old, all }),
            (false, Some(new)) => Ok(Mode::Replace {
                old,
                new: lf(new),
                all,
            }),
            (false, None) => bad(OLD_WITHOUT_NEW),
        }
    }
}
