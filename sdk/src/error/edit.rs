//! Why a set of edits was refused ([`Error::Edit`](super::Error::Edit)),
//! in words that say what to do next; re-exported by
//! [`session::edits`](crate::session::edits).

/// Characters of quoted text shown in an error message before it is cut short.
const PREVIEW_MAX_CHARS: usize = 80;
/// Match lines listed in an ambiguity message before the list is cut short.
const MAX_LISTED_LINES: usize = 10;

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

pub(crate) fn trim_trailing(line: &str) -> &str {
    line.trim_end_matches([' ', '\t', '\r'])
}

pub(crate) fn shorten(text: &str) -> String {
    match text.char_indices().nth(PREVIEW_MAX_CHARS) {
        Some((cut, _)) => format!("{}…", text.get(..cut).unwrap_or(text)),
        None => text.to_owned(),
    }
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

fn context_block(context: &[String]) -> String {
    context.iter().map(|line| format!("\n{line}")).collect()
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
