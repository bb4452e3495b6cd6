//! Splices: the byte ranges edits replace, put in file order, overlaps refused.

use super::*;

#[derive(Clone, Copy)]
pub(super) enum Side {
    Before,
    After,
}

/// A byte range of the original text and what replaces it. `core_*` is the range the
/// edit asked for; `start..end` may widen it by a line break that a deletion swallows,
/// which is given back when it collides with a neighbouring edit.
pub(super) struct Splice {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) core_start: usize,
    pub(super) core_end: usize,
    pub(super) text: String,
    pub(super) edit: usize,
}

impl Splice {
    pub(super) fn new(edit: usize, start: usize, end: usize, text: String) -> Self {
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
pub(super) fn order_splices(mut splices: Vec<Splice>) -> Result<Vec<Splice>, EditError> {
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
