//! Unit tests of `all`, line removal, inserts at the ends, text ranges, line
//! endings and the JSON shapes edits arrive in.

use serde_json::json;

use super::InsertAt::{End, Start};
use super::*;

fn apply(source: &str, edits: &[Edit]) -> EditResult {
    apply_edits(source, edits).unwrap_or_else(|e| panic!("edits failed on {source:?}: {e}"))
}

fn content(source: &str, edits: &[Edit]) -> String {
    apply(source, edits).content
}

/// Edits given as JSON, as a model sends them.
fn from_json(edits: serde_json::Value) -> Vec<Edit> {
    serde_json::from_value(edits).expect("edits parse")
}

#[test]
fn all_changes_every_exact_match_and_counts_each() {
    let source = "let total = 0;\nadd(total);\nreturn total;\n";
    let result = apply(source, &[Edit::replace("total", "sum").all()]);
    assert_eq!(result.content, "let sum = 0;\nadd(sum);\nreturn sum;\n");
    assert_eq!(result.applied, 3);
    assert_eq!(
        result.changes.iter().map(|c| c.line).collect::<Vec<_>>(),
        [1, 2, 3]
    );
}

#[test]
fn all_with_no_match_is_a_no_op() {
    for edit in [
        Edit::replace("absent", "x").all(),
        Edit::delete("absent").all(),
        Edit::insert_after("absent", "x").all(),
    ] {
        let result = apply("kept\n", &[edit]);
        assert_eq!((result.content.as_str(), result.applied), ("kept\n", 0));
        assert!(result.changes.is_empty());
    }
    // Without `all`, the same edit is an error.
    assert!(matches!(
        apply_edits("kept\n", &[Edit::replace("absent", "x")]),
        Err(EditError::NotFound { .. })
    ));
}

#[test]
fn all_uses_exact_matches_only() {
    // The whitespace-tolerant strategies would match `x = 1  `; `all` leaves it.
    let source = "x = 1  \ny = 2\n";
    let result = apply(source, &[Edit::replace("x = 1\n", "x = 3\n").all()]);
    assert_eq!((result.content.as_str(), result.applied), (source, 0));
    assert_eq!(
        content(source, &[Edit::replace("x = 1", "x = 3").all()]),
        "x = 3  \ny = 2\n"
    );
}

#[test]
fn delete_and_insert_take_all_too() {
    let source = "# TODO\ncode()\n# TODO\nmore()\n";
    let deleted = apply(source, &[Edit::delete("# TODO").all()]);
    assert_eq!(
        (deleted.content.as_str(), deleted.applied),
        ("code()\nmore()\n", 2)
    );
    let noted = content(
        "[a]\n1\n[a]\n2",
        &[Edit::insert_after("[a]", "; seen").all()],
    );
    assert_eq!(noted, "[a]\n; seen\n1\n[a]\n; seen\n2");
}

#[test]
fn emptying_a_line_removes_it() {
    let cases = [
        // (source, anchor, expected)
        ("one\ntwo\nthree", "two", "one\nthree"),
        ("one\ntwo\nthree", "one", "two\nthree"),
        // At the end of the file the break before it goes.
        ("one\ntwo\nthree", "three", "one\ntwo"),
        ("only", "only", ""),
        ("drop1\ndrop2\nkeep", "drop1\ndrop2", "keep"),
        // Indentation left alone on the line goes with it.
        (
            "def f():\n    trace()\n    run()\n",
            "trace()",
            "def f():\n    run()\n",
        ),
        ("a\n  b  \nc\n", "b", "a\nc\n"),
        // A match that takes its own break takes no more.
        ("a\nb\nc\n", "b\n", "a\nc\n"),
    ];
    for (source, anchor, expected) in cases {
        assert_eq!(
            content(source, &[Edit::delete(anchor)]),
            expected,
            "delete {anchor:?}"
        );
        assert_eq!(
            content(source, &[Edit::replace(anchor, "")]),
            expected,
            "replace {anchor:?} with nothing"
        );
    }
}

#[test]
fn removing_part_of_a_line_keeps_the_line() {
    assert_eq!(
        content("hello world\nnext", &[Edit::delete(" world")]),
        "hello\nnext"
    );
    assert_eq!(
        content("x\nhello world", &[Edit::delete("hello")]),
        "x\n world"
    );
    assert_eq!(
        content(
            "{\n  \"a\": 1,\n  \"b\": 2\n}",
            &[Edit::delete("\n  \"b\": 2")]
        ),
        "{\n  \"a\": 1,\n}"
    );
}

#[test]
fn neighbouring_removed_lines_do_not_collide() {
    let source = "a\nb\nc\nd\n";
    let edits = [Edit::delete("b"), Edit::replace("c", "")];
    assert_eq!(content(source, &edits), "a\nd\n");
    let edits = [Edit::delete("a"), Edit::delete("b")];
    assert_eq!(content("a\nb\nc", &edits), "c");
}

#[test]
fn inserting_at_the_ends_adds_one_separator_at_most() {
    assert_eq!(
        content("l1\nl2\n", &[Edit::insert_at(End, "l3")]),
        "l1\nl2\nl3"
    );
    assert_eq!(
        content("l1\nl2", &[Edit::insert_at(End, "l3")]),
        "l1\nl2\nl3"
    );
    assert_eq!(
        content("l2\nl3", &[Edit::insert_at(Start, "l1\n")]),
        "l1\nl2\nl3"
    );
    assert_eq!(
        content("l2\nl3", &[Edit::insert_at(Start, "l1")]),
        "l1\nl2\nl3"
    );
    assert_eq!(content("", &[Edit::insert_at(End, "first")]), "first");
    let both = [Edit::insert_at(Start, "head"), Edit::insert_at(End, "foot")];
    assert_eq!(content("body", &both), "head\nbody\nfoot");
}

#[test]
fn inserting_beside_an_indented_line_quoted_without_its_indent() {
    let source = "struct P {\n    x: f64,\n}\n";
    let after = content(source, &[Edit::insert_after("x: f64,", "y: f64,")]);
    assert_eq!(after, "struct P {\n    x: f64,\n    y: f64,\n}\n");
    let before = content(source, &[Edit::insert_before("x: f64,", "/// across")]);
    assert_eq!(before, "struct P {\n    /// across\n    x: f64,\n}\n");
    // Inside a line, text goes right beside the anchor.
    assert_eq!(
        content("f(a)", &[Edit::insert_after("f(a", ", b")]),
        "f(a, b)"
    );
}

#[test]
fn text_ranges_replace_from_the_first_anchor_through_the_second() {
    let source = "a = 1\n\ndef process(data):\n    old()\n    return data\n\nb = 2\n";
    let edit = Edit::between(
        "def process(data):",
        "    return data",
        "def process(data):\n    return new(data)",
    );
    let result = apply(source, &[edit]);
    assert_eq!(
        result.content,
        "a = 1\n\ndef process(data):\n    return new(data)\n\nb = 2\n"
    );
    let change = &result.changes[0];
    assert_eq!(
        (change.line, change.removed_lines, change.added_lines),
        (3, 3, 2)
    );
}

#[test]
fn text_ranges_pick_the_first_end_after_the_start() {
    // `}` appears three times; the block ends at the first after `fn b`.
    let source = "fn a() {\n}\nfn b() {\n    x();\n}\nfn c() {\n}\n";
    let edit = Edit::between("fn b() {", "}", "fn b() {}");
    assert_eq!(
        content(source, &[edit]),
        "fn a() {\n}\nfn b() {}\nfn c() {\n}\n"
    );
    // Markers on one line: only the span between them changes.
    let edit = Edit::between("[START]", "[END]", "[START]new[END]");
    assert_eq!(
        content("x [START]old[END] y", &[edit]),
        "x [START]new[END] y"
    );
}

#[test]
fn text_ranges_with_empty_content_delete_the_block() {
    let source = "keep\n// begin\ndrop\n// end\nalso keep";
    let edit = Edit::between("// begin", "// end", "");
    assert_eq!(content(source, &[edit]), "keep\n\nalso keep");
}

#[test]
fn text_ranges_report_a_missing_or_misplaced_end() {
    let source = "end marker\nstart marker\nstuff\n";
    let err = apply_edits(source, &[Edit::between("start marker", "end marker", "x")]).unwrap_err();
    assert_eq!(
        err,
        EditError::EndNotFound {
            edit: 0,
            anchor: "end marker".into(),
            from_line: 2
        }
    );
    assert!(err.to_string().contains("not found after `from`"), "{err}");
    let err = apply_edits(source, &[Edit::between("nowhere", "stuff", "x")]).unwrap_err();
    assert!(matches!(err, EditError::NotFound { .. }), "{err:?}");
    let err = apply_edits("x\ny\nx\n", &[Edit::between("x", "y", "z")]).unwrap_err();
    assert!(matches!(err, EditError::Ambiguous { .. }), "{err:?}");
}

#[test]
fn ranges_may_mix_a_line_number_and_text() {
    let source = "a\nb\nc\nd\n";
    assert_eq!(content(source, &[Edit::between(2, "c", "X")]), "a\nX\nd\n");
    assert_eq!(content(source, &[Edit::between("b", 3, "X")]), "a\nX\nd\n");
    let err = apply_edits(source, &[Edit::between("c", 1, "X")]).unwrap_err();
    assert!(matches!(err, EditError::InvalidEdit { .. }), "{err:?}");
}

#[test]
fn line_endings_in_edits_are_read_as_lf() {
    let edits = [Edit::replace("line 2\r\n", "LINE 2\r\n")];
    assert_eq!(
        content("line 1\nline 2\nline 3", &edits),
        "line 1\nLINE 2\nline 3"
    );
    let result = apply("one\r\ntwo\r\nthree", &[Edit::replace("two", "2")]);
    assert_eq!(result.content, "one\n2\nthree");
}

#[test]
fn agenticks_json_shapes_apply() {
    let source = "import a\n\ndef main():\n    run()\n    stop()\n";
    let edits = from_json(json!([
        {"old": "import a", "insert": "after", "content": "import b"},
        {"old": "def main():", "insert": "before", "content": "# entry"},
        {"old": "stop()", "delete": true},
        {"insert": "end", "content": "main()\n"},
        {"old": "run()", "new": "go()", "all": true},
    ]));
    let result = apply(source, &edits);
    assert_eq!(
        result.content,
        "import a\nimport b\n\n# entry\ndef main():\n    go()\nmain()\n"
    );
    assert_eq!(result.applied, 5);
    let start = from_json(json!([{"insert": "start", "content": "#!/bin/sh"}]));
    assert_eq!(content("echo", &start), "#!/bin/sh\necho");
    let range = from_json(json!([{"from": "<a>", "to": "</a>", "content": "<a/>"}]));
    assert_eq!(content("<a>\n  x\n</a>\n<b/>", &range), "<a/>\n<b/>");
}

#[test]
fn dockhands_json_shapes_still_apply() {
    let edits = from_json(json!([
        {"insert": "x = 0", "before": "y = 1"},
        {"insert": "z = 2", "at": "end"},
        {"from": 2, "to": 2, "content": "y = 10"},
    ]));
    assert_eq!(content("w\ny = 1\n", &edits), "w\nx = 0\ny = 10\nz = 2");
    // `insert` holding the word "before" with an anchor field is text, not a place.
    let edits = from_json(json!([{"insert": "before", "before": "b"}]));
    assert_eq!(content("a\nb\n", &edits), "a\nbefore\nb\n");
}

#[test]
fn str_replace_field_names_are_read_too() {
    let edits = from_json(json!([{"old_string": "a", "new_string": "b", "replace_all": true}]));
    assert_eq!(edits, [Edit::replace("a", "b").all()]);
}

#[test]
fn malformed_agentick_edits_say_what_is_missing() {
    let reason = |edit: serde_json::Value| match apply_edits("a\n", &from_json(json!([edit]))) {
        Err(EditError::InvalidEdit { reason, .. }) => reason,
        other => panic!("expected InvalidEdit, got {other:?}"),
    };
    assert_eq!(
        reason(json!({"insert": "before", "content": "x"})),
        AGENTICK_INSERT_ANCHOR
    );
    assert_eq!(
        reason(json!({"old": "a", "insert": "after"})),
        AGENTICK_INSERT_CONTENT
    );
    assert_eq!(reason(json!({"from": "a", "content": "x"})), RANGE_FIELDS);
    assert_eq!(
        reason(json!({"from": "", "to": "a", "content": "x"})),
        EMPTY_ANCHOR
    );
    assert_eq!(reason(json!({"delete": true})), NOTHING_TO_DO);
    assert_eq!(reason(json!({"old": "", "new": "x"})), EMPTY_ANCHOR);
}

#[test]
fn changes_count_lines_removed_and_added() {
    let result = apply("a\nb\nc", &[Edit::replace("b", "b1\nb2\nb3")]);
    assert_eq!(result.content, "a\nb1\nb2\nb3\nc");
    let c = &result.changes[0];
    assert_eq!((c.line, c.removed_lines, c.added_lines), (2, 1, 3));
    let removed = apply("a\nb\nc", &[Edit::delete("b")]);
    let c = &removed.changes[0];
    assert_eq!(
        (c.line, c.removed.as_str(), c.removed_lines, c.added_lines),
        (2, "b\n", 1, 0)
    );
}

#[test]
fn edits_serialize_to_the_fields_they_set() {
    let json = serde_json::to_value(Edit::between("a", "b", "c")).unwrap();
    assert_eq!(json, json!({"from": "a", "to": "b", "content": "c"}));
    let json = serde_json::to_value(Edit::delete("x").all()).unwrap();
    assert_eq!(json, json!({"old": "x", "all": true, "delete": true}));
}
