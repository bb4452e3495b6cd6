//! Turning each edit into splices of the original: replacements, removals
//! that take their emptied line, inserts beside an anchor or at either end,
//! and ranges; then building the new text from the ordered splices.

use super::*;

impl<'s> Doc<'s> {
    /// The splices one edit makes; several for an `all` edit, none when it matched nothing.
    pub(super) fn resolve(&self, index: usize, mode: &Mode) -> Result<Vec<Splice>, EditError> {
        Ok(match mode {
            Mode::Replace { old, new, all } => self
                .matches(index, old, *all)?
                .iter()
                .map(|f| match prepare(new, f.indent) {
                    text if text.is_empty() => self.remove(index, f),
                    text => Splice::new(index, f.start, f.end, text),
                })
                .collect(),
            Mode::Delete { old, all } => self
                .matches(index, old, *all)?
                .iter()
                .map(|f| self.remove(index, f))
                .collect(),
            Mode::InsertNear {
                anchor,
                side,
                text,
                all,
            } => self
                .matches(index, anchor, *all)?
                .iter()
                .map(|f| self.insert_near(index, f, *side, text))
                .collect(),
            Mode::InsertAt { at, text } => vec![self.insert_at(index, *at, text)],
            Mode::Range { from, to, content } => vec![self.range(index, from, to, content)?],
        })
    }

    /// The line holding byte `pos`.
    fn line_at(&self, pos: usize) -> Option<&Line> {
        self.lines.get(self.line_number(pos) - 1)
    }

    /// Whether the match is alone on its lines (only whitespace beside it),
    /// and the first line's indentation before it.
    fn alone_on_its_lines(&self, found: &Found<'_>) -> Option<(&'s str, &Line, &Line)> {
        let first = self.line_at(found.start)?;
        let before = self.slice(first.start, found.start);
        if !before.trim().is_empty() {
            return None;
        }
        // A match ending in its line break ends on the line before `end`.
        let last = self.line_at(found.end.saturating_sub(1).max(found.start))?;
        let after = self.slice(found.end.min(last.end), last.end);
        after.trim().is_empty().then_some((before, first, last))
    }

    /// Whether the match ends with its own line break.
    fn takes_its_break(&self, found: &Found<'_>) -> bool {
        self.slice(found.start, found.end).ends_with('\n')
    }

    /// Removing text that leaves only whitespace on its line removes the
    /// line and its break, so no blank line is left behind; at the end of
    /// the file the break before it goes instead.
    fn remove(&self, index: usize, found: &Found<'_>) -> Splice {
        let mut splice = Splice::new(index, found.start, found.end, String::new());
        let Some((_, first, last)) = self.alone_on_its_lines(found) else {
            return splice;
        };
        splice.start = first.start;
        if self.takes_its_break(found) {
            return splice;
        }
        if last.next > last.end {
            splice.end = last.next;
        } else {
            splice.start = self.break_before(first.start);
            splice.end = last.end;
        }
        splice
    }

    /// An anchor alone on its lines gets the text on lines of its own,
    /// indented like the anchor's line when the anchor was quoted without
    /// that indentation; an anchor inside a line gets the text right beside it.
    fn insert_near(&self, index: usize, found: &Found<'_>, side: Side, text: &str) -> Splice {
        let Some((indent, first, last)) = self.alone_on_its_lines(found) else {
            let pos = match side {
                Side::Before => found.start,
                Side::After => found.end,
            };
            return Splice::new(index, pos, pos, prepare(text, found.indent));
        };
        let indent = found.indent.or((!indent.is_empty()).then_some(indent));
        let mut body = prepare(text, indent);
        let pos = match side {
            Side::Before => {
                ensure_break(&mut body);
                first.start
            }
            Side::After if self.takes_its_break(found) || last.next > last.end => {
                ensure_break(&mut body);
                last.next
            }
            Side::After => {
                body.insert(0, '\n');
                last.end
            }
        };
        Splice::new(index, pos, pos, body)
    }

    /// A separator is added only where the text and the file would otherwise run together.
    fn insert_at(&self, index: usize, at: InsertAt, text: &str) -> Splice {
        let len = self.text.len();
        let (pos, body) = match at {
            InsertAt::Start if self.text.is_empty() || text.ends_with('\n') => (0, text.to_owned()),
            InsertAt::Start => (0, format!("{text}\n")),
            InsertAt::End if self.text.is_empty() || self.text.ends_with('\n') => {
                (len, text.to_owned())
            }
            InsertAt::End => (len, format!("\n{text}")),
        };
        Splice::new(index, pos, pos, body)
    }

    fn range(
        &self,
        index: usize,
        from: &RangeBound,
        to: &RangeBound,
        content: &str,
    ) -> Result<Splice, EditError> {
        if let (RangeBound::Line(from), RangeBound::Line(to)) = (from, to) {
            return self.line_range(index, *from, *to, content);
        }
        let line_span = |n: usize| {
            self.line(n)
                .map(|l| (l.start, l.end))
                .ok_or_else(|| invalid(index, range_problem(n, n, self.lines.len())))
        };
        let (start, after) = match from {
            RangeBound::Line(n) => line_span(*n)?,
            RangeBound::Text(anchor) => {
                let found = self.matches(index, anchor, false)?;
                found.first().map(|f| (f.start, f.end)).unwrap_or_default()
            }
        };
        let end = match to {
            RangeBound::Line(n) => {
                let (line_start, line_end) = line_span(*n)?;
                if line_start < self.line_at(start).map_or(0, |l| l.start) {
                    let first = self.line_number(start);
                    return Err(invalid(index, range_problem(first, *n, self.lines.len())));
                }
                line_end
            }
            RangeBound::Text(anchor) => match self.find_after(anchor, after) {
                Some(found) => found.end,
                None => {
                    return Err(EditError::EndNotFound {
                        edit: index,
                        anchor: anchor.clone(),
                        from_line: self.line_number(start),
                    })
                }
            },
        };
        Ok(Splice::new(index, start, end, content.to_owned()))
    }

    /// The first match at or after `pos`, by the first strategy that finds one there.
    fn find_after(&self, anchor: &str, pos: usize) -> Option<Found<'s>> {
        let after = |found: Vec<Found<'s>>| found.into_iter().find(|f| f.start >= pos);
        let pattern = Pattern::new(anchor);
        after(self.find_exact(anchor))
            .or_else(|| after(self.find_lines(&pattern, false)))
            .or_else(|| after(self.find_lines(&pattern, true)))
    }

    /// Whole lines by number; the file's trailing line break, or its absence, is kept.
    fn line_range(
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
        splice.text = text.to_owned();
        if had_break {
            ensure_break(&mut splice.text);
        }
        Ok(splice)
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
            changes.push(Change::new(line, removed, splice.text));
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

/// New text re-indented to the matched block when its anchor matched with
/// shifted indentation.
fn prepare(text: &str, indent: Option<&str>) -> String {
    match indent {
        Some(indent) => reindent(text, indent),
        None => text.to_owned(),
    }
}

fn ensure_break(text: &mut String) {
    if !text.ends_with('\n') {
        text.push('\n');
    }
}
