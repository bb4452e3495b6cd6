//! Errors are said once: a variant shows its cause in its message or returns
//! it from `source()`, never both, so reporters that print the whole chain
//! (anyhow's `{:#}`, eyre, the CLI) say each thing once.

use super::Error;
use crate::session::edits::EditError;

fn wrapping_errors() -> Vec<Error> {
    let io = || Error::io("reading /tmp/x", std::io::Error::other("disk on fire"));
    vec![
        io(),
        Error::Edit(EditError::InvalidEdit {
            edit: 0,
            reason: "an anchor is empty".into(),
        }),
        Error::RetriesExhausted {
            attempts: vec![
                "first failure".into(),
                "reading /tmp/x: disk on fire".into(),
            ],
            last: Box::new(io()),
        },
        Error::from(crate::kernel::KernelError::Unavailable {
            reason: "the relay exited".into(),
        }),
    ]
}

/// Sentences of a message, trimmed (what a reader would notice repeated).
fn sentences(text: &str) -> Vec<String> {
    text.split([':', ';', '\n'])
        .map(|s| s.trim().to_string())
        .filter(|s| s.len() > 3)
        .collect()
}

#[test]
fn anyhow_chains_say_nothing_twice() {
    for error in wrapping_errors() {
        let shown = format!("{:#}", anyhow::Error::new(error));
        let parts = sentences(&shown);
        let mut seen = std::collections::HashSet::new();
        for part in &parts {
            assert!(seen.insert(part.clone()), "`{part}` said twice in: {shown}");
        }
    }
}

#[test]
fn a_cause_in_the_message_is_not_also_the_source() {
    for error in wrapping_errors() {
        if let Some(source) = std::error::Error::source(&error) {
            assert!(
                !error.to_string().contains(&source.to_string()),
                "{error} repeats its source"
            );
        }
    }
    // The cause is still in the message.
    assert!(wrapping_errors()[0].to_string().contains("disk on fire"));
}
