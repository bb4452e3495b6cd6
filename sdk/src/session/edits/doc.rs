//! The original text as lines, and finding an anchor in it: exactly, ignoring
//! trailing whitespace, or ignoring a uniform shift of indentation.

use super::*;

/// One line of the original: `start..end` is its text without the line break, `next`
/// where the following line starts.
#[derive(Clone, Copy)]
pub(super) struct Line {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) next: usize,
}

/// Where an anchor matched; `indent` is set when it matched with shifted indentation
/// and holds the matched block's own indentation.
pub(super) struct Found<'s> {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) indent: Option<&'s str>,
}

/// An anchor split into lines, trailing whitespace removed, for the line strategies.
pub(super) struct Pattern<'a> {
    pub(super) lines: Vec<&'a str>,
    pub(super) trailing_newline: bool,
}

impl<'a> Pattern<'a> {
    pub(super) fn new(anchor: &'a str) -> Self {
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
pub(super) struct Doc<'s> {
    pub(super) text: &'s str,
    pub(super) lines: Vec<Line>,
    /// Each line's text without trailing whitespace, for the line strategies.
    pub(super) trimmed: Vec<&'s str>,
    /// Byte offsets of every `\n`, to turn offsets into line numbers.
    pub(super) newlines: Vec<usize>,
    pub(super) crlf: bool,
}

impl<'s> Doc<'s> {
    pub(super) fn new(text: &'s str) -> Self {
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

    pub(super) fn eol(&self) -> &'static str {
        if self.crlf {
            "\r\n"
        } else {
            "\n"
        }
    }

    pub(super) fn slice(&self, start: usize, end: usize) -> &'s str {
        self.text.get(start..end).unwrap_or("")
    }

    pub(super) fn line_text(&self, line: &Line) -> &'s str {
        self.slice(line.start, line.end)
    }

    /// The line with 1-based `number`, if the file has it.
    pub(super) fn line(&self, number: usize) -> Option<&Line> {
        self.lines.get(number.checked_sub(1)?)
    }

    pub(super) fn line_number(&self, pos: usize) -> usize {
        1 + self.newlines.partition_point(|&p| p < pos)
    }

    /// Length of the line break starting at `pos`, 0 if there is none.
    pub(super) fn break_at(&self, pos: usize) -> usize {
        let rest = self.slice(pos, self.text.len());
        if rest.starts_with("\r\n") {
            2
        } else {
            usize::from(rest.starts_with('\n'))
        }
    }

    /// Where the line break ending just before `pos` starts, or `pos` if there is none.
    pub(super) fn break_before(&self, pos: usize) -> usize {
        pos - line_break_len(self.slice(0, pos))
    }

    pub(super) fn ends_with_break(&self, found: &Found<'_>) -> bool {
        self.slice(found.start, found.end).ends_with('\n')
    }

    pub(super) fn covers_whole_lines(&self, found: &Found<'_>) -> bool {
        let starts_line = found.start == 0 || self.slice(0, found.start).ends_with('\n');
        let ends_line = found.end == self.text.len() || self.break_at(found.end) > 0;
        starts_line && (ends_line || self.ends_with_break(found))
    }

    /// Converts new text to the file's line breaks, re-indenting it first when its
    /// anchor matched with shifted indentation.
    pub(super) fn prepare(&self, text: &str, indent: Option<&str>) -> String {
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

    pub(super) fn ensure_break(&self, text: &mut String) {
        if !text.ends_with('\n') {
            text.push_str(self.eol());
        }
    }

    /// Turns one edit into splices of the original, choosing its mode by precedence
    /// range > insert > delete > replace.
    pub(super) fn resolve(&self, index: usize, edit: &Edit) -> Result<Vec<Splice>, EditError> {
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

    pub(super) fn insert(
        &self,
        index: usize,
        edit: &Edit,
        text: &str,
    ) -> Result<Vec<Splice>, EditError> {
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

    pub(super) fn range(
        &self,
        index: usize,
        from: usize,
        to: usize,
        text: &str,
    ) -> Result<Splice, EditError> {
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
    pub(super) fn insert_at(&self, index: usize, at: InsertAt, text: &str) -> Splice {
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
    pub(super) fn insert_near(
        &self,
        index: usize,
        found: &Found<'_>,
        side: Side,
        text: &str,
    ) -> Splice {
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
    pub(super) fn delete(&self, index: usize, found: &Found<'_>) -> Splice {
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
    pub(super) fn matches(
        &self,
        index: usize,
        anchor: &str,
        all: bool,
    ) -> Result<Vec<Found<'s>>, EditError> {
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
    pub(super) fn find(&self, anchor: &str) -> Vec<Found<'s>> {
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
    pub(super) fn find_exact(&self, anchor: &str) -> Vec<Found<'s>> {
        let found = occurrences(self.text, anchor);
        if found.is_empty() && self.crlf && anchor.contains('\n') {
            return occurrences(self.text, &self.prepare(anchor, None));
        }
        found
    }

    pub(super) fn find_lines(&self, pattern: &Pattern<'_>, shifted: bool) -> Vec<Found<'s>> {
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
    pub(super) fn closest_line(&self, anchor: &str) -> Option<(usize, String)> {
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

    pub(super) fn build(&self, splices: Vec<Splice>, applied: usize) -> EditResult {
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
