//! Fed to every Monty session before the user's code: what the code may use
//! without importing, and the loop guards `rules.rs` inserts under the strict
//! policy. The text is `prelude.py`.

/// The prelude's text, with its limits as placeholders.
pub const TEMPLATE: &str = include_str!("prelude.py");

const GUARDS_BEGIN: &str = "# -- loop guards: begin --\n";
const GUARDS_END: &str = "# -- loop guards: end --\n";

/// The prelude for a loop limit of `loop_limit` iterations; the loop guards'
/// definitions only when `guards` (the strict policy inserts guards).
pub fn text(loop_limit: u64, guards: bool) -> String {
    let template = match (TEMPLATE.find(GUARDS_BEGIN), TEMPLATE.find(GUARDS_END)) {
        (Some(begin), Some(end)) if !guards => {
            format!(
                "{}{}",
                &TEMPLATE[..begin],
                &TEMPLATE[end + GUARDS_END.len()..]
            )
        }
        _ => TEMPLATE.to_string(),
    };
    template
        .replace("__DH_LOOP_LIMIT__", &loop_limit.to_string())
        .replace("__DH_TICK_LIMIT__", &(loop_limit + 1).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limits_are_filled_in() {
        let text = text(25, true);
        assert!(text.contains("_dh_islice(it, 25)"), "{text}");
        assert!(text.contains("if n > 26:"), "{text}");
        assert!(!text.contains("__DH_"), "{text}");
        assert!(text.contains("_dh_ticks = {}"), "{text}");
    }

    #[test]
    fn the_guards_come_only_with_the_strict_policy() {
        let plain = text(25, false);
        assert!(!plain.contains("_dh_loop"), "{plain}");
        assert!(!plain.contains("_dh_tick"), "{plain}");
        assert!(plain.contains("def _dh_fan("), "{plain}");
        assert!(plain.contains("ToolError = RuntimeError"), "{plain}");
        assert!(TEMPLATE.contains(GUARDS_BEGIN) && TEMPLATE.contains(GUARDS_END));
    }
}
