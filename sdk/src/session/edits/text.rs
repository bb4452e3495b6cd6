//! Small text helpers: indentation, similarity, and the wording of errors.

use super::*;
pub(super) use crate::error::edit::{shorten, trim_trailing};

/// Length of the line break `text` ends with: 2 for `\r\n`, 1 for `\n`, else 0.
pub(super) fn line_break_len(text: &str) -> usize {
    if text.ends_with("\r\n") {
        2
    } else {
        usize::from(text.ends_with('\n'))
    }
}

/// Says why `from..=to` names no lines of a file with `count` lines.
pub(super) fn range_problem(from: usize, to: usize, count: usize) -> String {
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

pub(super) fn occurrences<'s>(text: &'s str, needle: &str) -> Vec<Found<'s>> {
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
pub(super) fn non_overlapping(found: Vec<Found<'_>>) -> Vec<Found<'_>> {
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
pub(super) fn shifted_match<'s>(
    anchor: &[&str],
    anchor_indent: usize,
    source: &[&'s str],
) -> Option<&'s str> {
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
pub(super) fn reindent(text: &str, indent: &str) -> String {
    let base = min_indent(text.split('\n').map(trim_trailing)).unwrap_or(0);
    let shift = |line: &str| match trim_trailing(line) {
        "" => String::new(),
        _ => format!("{indent}{}", line.get(base..).unwrap_or(line)),
    };
    text.split('\n').map(shift).collect::<Vec<_>>().join("\n")
}

pub(super) fn indent_len(line: &str) -> usize {
    line.len() - line.trim_start_matches([' ', '\t']).len()
}

/// Least indentation among non-empty lines; `None` if every line is empty. Expects
/// lines already stripped of trailing whitespace, so blank lines are empty.
pub(super) fn min_indent<'a>(lines: impl Iterator<Item = &'a str>) -> Option<usize> {
    lines.filter(|l| !l.is_empty()).map(indent_len).min()
}

/// 1.0 for equal strings down to 0.0 for nothing in common, by edit distance.
pub(super) fn similarity(a: &str, b: &str) -> f64 {
    let cut = |s: &str| s.chars().take(SIMILARITY_MAX_CHARS).collect::<String>();
    strsim::normalized_levenshtein(&cut(a), &cut(b))
}

pub(super) fn plural(count: usize, word: &str) -> String {
    let s = if count == 1 { "" } else { "s" };
    format!("{count} {word}{s}")
}
