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
        Self {
            text,
            lines,
            trimmed,
            newlines,
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

    /// Where the line break ending just before `pos` starts, or `pos` if there is none.
    pub(super) fn break_before(&self, pos: usize) -> usize {
        pos - line_break_len(self.slice(0, pos))
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
        // Every match of a rename, and only real ones: exact text, none is fine.
        if all {
            return Ok(non_overlapping(occurrences(self.text, anchor)));
        }
        let found = self.find(anchor);
        let anchor = anchor.to_owned();
        if found.is_empty() {
            let closest = self.closest_line(&anchor);
            let context = closest
                .as_ref()
                .map(|(line, _)| self.context(*line))
                .unwrap_or_default();
            return Err(EditError::NotFound {
                edit: index,
                anchor,
                closest,
                context,
            });
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

    pub(super) fn find_exact(&self, anchor: &str) -> Vec<Found<'s>> {
        occurrences(self.text, anchor)
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

    /// Lines `line - 2 ..= line + 2`, numbered, `line` marked with `>`.
    pub(super) fn context(&self, line: usize) -> Vec<String> {
        let first = line.saturating_sub(CONTEXT_LINES).max(1);
        (first..=line + CONTEXT_LINES)
            .filter_map(|n| {
                let text = self.line_text(self.line(n)?);
                let marker = if n == line { ">" } else { " " };
                Some(format!("{marker} {n:>4} | {}", shorten(text)))
            })
            .collect()
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
}
