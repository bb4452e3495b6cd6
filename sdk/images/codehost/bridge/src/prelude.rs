//! Fed to every Monty session before the user's code: what the code may use
//! without importing, and the loop guards `rules.rs` inserts. The text is
//! `prelude.py`.

/// The prelude's text, with its limits as placeholders.
pub const TEMPLATE: &str = include_str!("prelude.py");

/// The prelude for a loop limit of `loop_limit` iterations.
pub fn text(loop_limit: u64) -> String {
    TEMPLATE
        .replace("__DH_LOOP_LIMIT__", &loop_limit.to_string())
        .replace("__DH_TICK_LIMIT__", &(loop_limit + 1).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limits_are_filled_in() {
        let text = text(25);
        assert!(text.contains("_dh_islice(it, 25)"), "{text}");
        assert!(text.contains("if n > 26:"), "{text}");
        assert!(!text.contains("__DH_"), "{text}");
        assert!(text.contains("_dh_ticks = {}"), "{text}");
    }
}
