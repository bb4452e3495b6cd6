//! Unit tests of edit parsing, matching and application.

use super::InsertAt::{End, Start};
use super::*;

fn check(source: &str, edits: &[Edit], expected: &str) {
    match apply_edits(source, edits) {
        Ok(result) => assert_eq!(result.content, expected, "source: {source:?}"),
        Err(e) => panic!("edits failed on {source:?}: {e}"),
    }
}

fn fail(source: &str, edits: &[Edit]) -> EditError {
    match apply_edits(source, edits) {
        Ok(result) => panic!("edits unexpectedly applied: {:?}", result.content),
        Err(e) => e,
    }
}

fn reason(source: &str, edit: Edit) -> String {
    match fail(source, &[Edit::insert_at(Start, "ok"), edit]) {
        EditError::InvalidEdit { edit: 1, reason } => reason,
        other => panic!("unexpected error {other:?}"),
    }
}

#[test]
fn replace_single_match() {
    let (source, fixed) = ("def f(a, b):\n    a - b\n", "def f(a, b):\n    a + b\n");
    check(source, &[Edit::replace("a - b", "a + b")], fixed);
    // Replacing a whole line with nothing removes the line.
    check("a\nb\nc\n", &[Edit::replace("b", "")], "a\nc\n");
}

#[test]
fn replace_all_counts_each_match_and_records_each_change() {
    let edits = [Edit::replace("a", "c").all(), Edit::insert_at(End, "d\n")];
    let result = apply_edits("a\nb\na\n", &edits).unwrap();
    assert_eq!(
        (result.content.as_str(), result.applied),
        ("c\nb\nc\nd\n", 3)
    );
    let change =
        |line, removed: &str, added: &str| Change::new(line, removed.to_owned(), added.to_owned());
    let expected = [
        change(1, "a", "c"),
        change(3, "a", "c"),
        change(4, "", "d\n"),
    ];
    assert_eq!(result.changes, expected);
}

#[test]
fn edits_resolve_against_the_original() {
    let swap = [Edit::replace("a", "b"), Edit::replace("b", "c")];
    check("a b", &swap, "b c");
    check("a\n", &[], "a\n");
}

#[test]
fn ambiguous_lists_lines() {
    let source = "x = 1\ny\nx = 1\nz\nx = 1\n";
    let e = fail(source, &[Edit::replace("x = 1", "x = 2")]);
    let lines = vec![1, 3, 5];
    let anchor = "x = 1".to_owned();
    assert_eq!(
        e,
        EditError::Ambiguous {
            edit: 0,
            anchor,
            matches: 3,
            lines
        }
    );
    let expected = "edit 0: `x = 1` matches 3 places (lines 1, 3, 5); \
                    add more context or set all";
    assert_eq!(e.to_string(), expected);
    let e = fail("===", &[Edit::replace("==", "!=")]);
    assert!(e.to_string().contains("matches 2 places (lines 1, 1)"));
    check("===", &[Edit::replace("==", "!").all()], "!=");
}

#[test]
fn delete_whole_lines_takes_their_line_break() {
    check("a\nb\nc\n", &[Edit::delete("b")], "a\nc\n");
    check("a\nb\na\n", &[Edit::delete("a").all()], "b\n");
    check("a", &[Edit::delete("a")], "");
    // The last line has no break of its own, so the one before it goes.
    check("a\nb", &[Edit::delete("b")], "a");
    check("a\nb\nc", &[Edit::delete("b\nc")], "a");
    // An anchor that ends with a break already took it; the blank line stays.
    check("a\nb\n\nc\n", &[Edit::delete("b\n")], "a\n\nc\n");
}

#[test]
fn delete_mid_line() {
    let source = "let x = 1; // note\n";
    check(source, &[Edit::delete(" // note")], "let x = 1;\n");
}

#[test]
fn deleting_neighbouring_lines_in_separate_edits() {
    check("x\na\nb", &[Edit::delete("a"), Edit::delete("b")], "x\n");
    check("a\nb", &[Edit::delete("b"), Edit::delete("a")], "");
    check("a\nb\nc\n", &[Edit::delete("a"), Edit::delete("b")], "c\n");
}

#[test]
fn insert_next_to_whole_lines() {
    check("a\nb\n", &[Edit::insert_after("a", "x")], "a\nx\nb\n");
    check("a\nb\n", &[Edit::insert_after("a\n", "x\n")], "a\nx\nb\n");
    check("a\nb", &[Edit::insert_after("b", "c")], "a\nb\nc");
    check("a\nb\n", &[Edit::insert_before("b", "x")], "a\nx\nb\n");
    check("a\nb\n", &[Edit::insert_before("a\nb", "x")], "x\na\nb\n");
}

#[test]
fn insert_inside_a_line_is_raw() {
    check("x = 1;\n", &[Edit::insert_before("1", "-")], "x = -1;\n");
    check("foo(a)\n", &[Edit::insert_after("a)", ";")], "foo(a);\n");
}

#[test]
fn insert_after_every_match() {
    let edit = Edit::insert_after("x", "y");
    check("x\na\nx\n", &[edit.clone().all()], "x\ny\na\nx\ny\n");
    let e = fail("x\nx\n", &[edit]);
    assert!(matches!(e, EditError::Ambiguous { matches: 2, .. }));
}

#[test]
fn insert_at_start_and_end() {
    check("a\n", &[Edit::insert_at(Start, "x")], "x\na\n");
    check("a\n", &[Edit::insert_at(Start, "x\n")], "x\na\n");
    // The file's last break separates; none is added after the text.
    check("a\n", &[Edit::insert_at(End, "x")], "a\nx");
    check("a\n", &[Edit::insert_at(End, "x\n")], "a\nx\n");
    check("a", &[Edit::insert_at(End, "x")], "a\nx");
    check("", &[Edit::insert_at(Start, "x")], "x");
    check("", &[Edit::insert_at(End, "x\n")], "x\n");
}

#[test]
fn same_position_inserts_keep_edit_order() {
    let x = Edit::insert_before("b", "x");
    let y = Edit::insert_after("a", "y");
    let z = Edit::insert_before("b", "z");
    check("a\nb\n", &[x, y, z], "a\nx\ny\nz\nb\n");
}

#[test]
fn range_replaces_lines() {
    check("1\n2\n3\n4\n", &[Edit::range(2, 3, "x")], "1\nx\n4\n");
    check("1\n2\n3\n4\n", &[Edit::range(1, 4, "x\ny\n")], "x\ny\n");
    check("1\n2\n3", &[Edit::range(3, 3, "x")], "1\n2\nx");
}

#[test]
fn range_with_empty_content_deletes_lines() {
    check("1\n2\n3\n4\n", &[Edit::range(2, 3, "")], "1\n4\n");
    check("1\n2\n3", &[Edit::range(2, 3, "")], "1");
    check("1\n", &[Edit::range(1, 1, "")], "");
}

#[test]
fn range_bounds_are_checked() {
    assert!(reason("a\n", Edit::range(0, 1, "x")).contains("numbered from 1"));
    let backwards = reason("a\nb\nc\n", Edit::range(3, 2, "x"));
    assert!(backwards.contains("`from` is after `to`"));
    let past_end = reason("a\nb\nc\nd\n", Edit::range(2, 5, "x"));
    let expected = "lines 2 to 5 are not a valid range: \
                    `to` is past the end of the file; the file has 4 lines";
    assert_eq!(past_end, expected);
    assert!(reason("", Edit::range(1, 1, "x")).ends_with("the file has 0 lines"));
    let to = Some(RangeBound::Line(1));
    assert_eq!(
        reason(
            "a\n",
            Edit {
                to,
                ..Edit::default()
            }
        ),
        RANGE_FIELDS
    );
    let (from, content) = (Some(RangeBound::Line(1)), None);
    assert_eq!(
        reason(
            "a\n",
            Edit {
                from,
                content,
                ..Edit::range(1, 1, "x")
            }
        ),
        RANGE_FIELDS
    );
}

#[test]
fn exact_match_wins_over_looser_strategies() {
    // Ignoring trailing whitespace would also match lines 1-2: ambiguous.
    check("a \nb\na\nb\n", &[Edit::replace("a\nb", "X")], "a \nb\nX\n");
}

#[test]
fn trailing_whitespace_is_ignored() {
    let edit = Edit::replace("a = 1\nb = 2", "a = 10\nb = 20");
    check("a = 1   \nb = 2\t\nc\n", &[edit], "a = 10\nb = 20\nc\n");
    check("x\ny\nz\n", &[Edit::replace("x  \ny\t", "w")], "w\nz\n");
    check("x\ny\nz\n", &[Edit::delete("x  \ny \n")], "z\n");
}

#[test]
fn shifted_indentation_reindents_replacement() {
    let source = "class A:\n    def f(self):\n        x = 1\n        return x\n";
    let old = "def f(self):\n    x = 1\n    return x";
    let new = "def f(self):\n    x = 2\n  \n    return x * 2";
    let expected = "class A:\n    def f(self):\n        x = 2\n\n        return x * 2\n";
    check(source, &[Edit::replace(old, new)], expected);
}

#[test]
fn deeper_anchor_indentation_matches_shallower_source() {
    let source = "fn a() {\n    let x = 1;\n    let y = 2;\n}\n";
    let old = "        let x = 1;\n        let y = 2;";
    let new = "        let x = 10;\n          let y = 20;";
    let expected = "fn a() {\n    let x = 10;\n      let y = 20;\n}\n";
    check(source, &[Edit::replace(old, new)], expected);
}

#[test]
fn shifted_indentation_keeps_the_source_indent_string() {
    let source = "func f() {\n\tif x {\n\t\ty()\n\t}\n}\n";
    let edit = Edit::replace("if x {\n\ty()\n}", "if x {\n\tz()\n}");
    check(source, &[edit], "func f() {\n\tif x {\n\t\tz()\n\t}\n}\n");
}

#[test]
fn shifted_indentation_reindents_inserts() {
    let source = "fn main() {\n    let a = 1;\n    let b = 2;\n}\n";
    let anchor = "let a = 1;\nlet b = 2;";
    let expected = "fn main() {\n    let a = 1;\n    let b = 2;\n    let c = 3;\n}\n";
    check(
        source,
        &[Edit::insert_after(anchor, "let c = 3;")],
        expected,
    );
    let expected = "fn main() {\n    // setup\n    let a = 1;\n    let b = 2;\n}\n";
    check(
        source,
        &[Edit::insert_before(anchor, "// setup\n")],
        expected,
    );
}

#[test]
fn shifted_matches_can_be_ambiguous() {
    let source = "  a\n  b\n    a\n    b\n";
    let e = fail(source, &[Edit::replace("a\nb", "c")]);
    let expected = "edit 0: `a` (2 lines) matches 2 places (lines 1, 3); \
                    add more context or set all";
    assert_eq!(e.to_string(), expected);
    // `all` takes exact matches only: a rename never touches look-alikes.
    let result = apply_edits(source, &[Edit::replace("a\nb", "c").all()]).unwrap();
    assert_eq!((result.content.as_str(), result.applied), (source, 0));
    check(
        source,
        &[Edit::replace("  a\n  b", "c").all()],
        "c\n    a\n    b\n",
    );
}

#[test]
fn edits_on_one_region_overlap() {
    let edits = [Edit::replace("hello world", "hi"), Edit::delete("world")];
    let e = fail("hello world\n", &edits);
    let expected = "edits 0 and 1 overlap: both change the same text; \
                    combine them into one edit or anchor them on different text";
    assert_eq!(e.to_string(), expected);
    let edits = [Edit::insert_after("a", "1"), Edit::replace("abc", "X")];
    assert!(matches!(fail("abc", &edits), EditError::Overlap { .. }));
}

#[test]
fn adjacent_edits_do_not_overlap() {
    let edits = [Edit::replace("def", "2"), Edit::replace("abc", "1")];
    check("abcdef", &edits, "12");
    let edits = [Edit::replace("abc", "X"), Edit::insert_after("abc", "!")];
    check("abc;", &edits, "X!;");
}

#[test]
fn not_found_names_the_closest_line() {
    let e = fail(
        "fn main() {\n    fo();\n}\n",
        &[Edit::replace("foo()", "x")],
    );
    let closest = Some((2, "    fo();".to_owned()));
    let anchor = "foo()".to_owned();
    assert_eq!(
        e,
        EditError::NotFound {
            edit: 0,
            anchor,
            closest,
            context: vec![
                "     1 | fn main() {".into(),
                ">    2 |     fo();".into(),
                "     3 | }".into(),
            ],
        }
    );
    let expected = "edit 0: `foo()` not found; closest line 2: `    fo();`; \
                    re-read the file to get its current content\n     1 | fn main() {\n>    2 |     fo();\n     3 | }";
    assert_eq!(e.to_string(), expected);
}

#[test]
fn not_found_in_an_empty_file_has_no_closest_line() {
    let e = fail("", &[Edit::insert_after("x", "y")]);
    let anchor = "x".to_owned();
    assert_eq!(
        e,
        EditError::NotFound {
            edit: 0,
            anchor,
            closest: None,
            context: Vec::new(),
        }
    );
    assert!(e.to_string().contains("not found"));
}

#[test]
fn a_bad_edit_applies_nothing() {
    let source = String::from("a\nb\nc\n");
    let good = [Edit::replace("a", "x"), Edit::delete("c")];
    let edits = [good[0].clone(), Edit::replace("zz", "y"), good[1].clone()];
    assert!(matches!(
        fail(&source, &edits),
        EditError::NotFound { edit: 1, .. }
    ));
    assert_eq!(source, "a\nb\nc\n");
    check(&source, &good, "x\nb\n");
}

#[test]
fn crlf_is_read_and_written_as_lf() {
    let source = "a\r\nb\r\nc\r\n";
    check(source, &[Edit::replace("a\nb", "x\ny\nz")], "x\ny\nz\nc\n");
    check(source, &[Edit::replace("a\r\nb", "x\r\ny")], "x\ny\nc\n");
    check(source, &[Edit::delete("b")], "a\nc\n");
    check(source, &[Edit::insert_after("a", "n")], "a\nn\nb\nc\n");
    check(source, &[Edit::range(2, 2, "p\r\nq")], "a\np\nq\nc\n");
    check("a\r\nb", &[Edit::insert_at(End, "x")], "a\nb\nx");
    check("a\r\nb", &[Edit::delete("b")], "a");
    let edit = Edit::replace("  a\n  b", "  c\n  d");
    check("  a  \r\n  b\r\n", &[edit], "  c\n  d\n");
}

#[test]
fn unicode_is_sliced_on_char_boundaries() {
    let source = "café ☕\n日本語テキスト\n🎉 party\n";
    let edits = [
        Edit::replace("日本語", "中文"),
        Edit::delete("🎉 "),
        Edit::insert_after("café", " au lait"),
    ];
    check(source, &edits, "café au lait ☕\n中文テキスト\nparty\n");
    let e = fail(source, &[Edit::replace("日本誤テキスト", "x")]);
    assert!(e.to_string().contains("closest line 2: `日本語テキスト`"));
    check("ééé", &[Edit::replace("éé", "e").all()], "eé");
    let long = fail("x", &[Edit::delete("é".repeat(100))]).to_string();
    assert!(long.contains(&format!("`{}…` not found", "é".repeat(80))));
}

#[test]
fn edits_deserialize_from_json() {
    let cases = [
        (r#"{"old":"a","new":"b"}"#, Edit::replace("a", "b")),
        (
            r#"{"old":"a","new":"","all":true}"#,
            Edit::replace("a", "").all(),
        ),
        (
            r#"{"insert":"x","after":"a"}"#,
            Edit::insert_after("a", "x"),
        ),
        (r#"{"from":2,"to":3,"content":"z"}"#, Edit::range(2, 3, "z")),
        (r#"{"old":"a","delete":true}"#, Edit::delete("a")),
        (r#"{"insert":"x","at":"end"}"#, Edit::insert_at(End, "x")),
    ];
    for (json, edit) in cases {
        assert_eq!(serde_json::from_str::<Edit>(json).unwrap(), edit, "{json}");
        let round_trip = serde_json::to_string(&edit).unwrap();
        assert_eq!(serde_json::from_str::<Edit>(&round_trip).unwrap(), edit);
    }
}

#[test]
fn mode_precedence() {
    let (old, new) = (Some("zz".to_owned()), Some("q".to_owned()));
    let range = Edit {
        old: old.clone(),
        ..Edit::range(1, 1, "z")
    };
    check("a\nb\n", &[range], "z\nb\n");
    let insert = Edit {
        old,
        delete: true,
        ..Edit::insert_after("a", "x")
    };
    check("a\nb\n", &[insert], "a\nx\nb\n");
    check(
        "a\nb\n",
        &[Edit {
            new,
            ..Edit::delete("a")
        }],
        "b\n",
    );
}

#[test]
fn invalid_edits_are_explained() {
    assert_eq!(reason("a\n", Edit::default()), NOTHING_TO_DO);
    let old = Some("a".to_owned());
    assert_eq!(
        reason(
            "a\n",
            Edit {
                old,
                ..Edit::default()
            }
        ),
        OLD_WITHOUT_NEW
    );
    assert_eq!(reason("a\n", Edit::replace("", "x")), EMPTY_ANCHOR);
    assert_eq!(reason("a\n", Edit::delete("")), EMPTY_ANCHOR);
    assert_eq!(reason("a\n", Edit::insert_before("", "x")), EMPTY_ANCHOR);
    assert_eq!(reason("a\n", Edit::insert_after("a", "")), EMPTY_INSERT);
    assert_eq!(
        reason(
            "a\n",
            Edit {
                insert: Some("x".into()),
                ..Edit::default()
            }
        ),
        INSERT_PLACE
    );
    let at = Some(End);
    let two_places = Edit {
        at,
        ..Edit::insert_after("a", "x")
    };
    assert_eq!(reason("a\n", two_places), INSERT_PLACE);
    let e = fail(
        "a\n",
        &[Edit {
            insert: Some("x".into()),
            ..Edit::default()
        }],
    );
    assert_eq!(e.to_string(), format!("edit 0: {INSERT_PLACE}"));
}

#[test]
fn arbitrary_input_never_panics() {
    const PIECES: [&str; 12] = [
        "a", "b", " ", "\t", "\n", "\r\n", "\r", "é", "🎉", "中", "  x", "\n\n",
    ];
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |bound: usize| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1);
        (state >> 33) as usize % bound
    };
    let text = |max: usize, next: &mut dyn FnMut(usize) -> usize| -> String {
        (0..next(max)).map(|_| PIECES[next(PIECES.len())]).collect()
    };
    for _ in 0..3000 {
        let source = text(12, &mut next);
        let mut edits = Vec::new();
        for _ in 0..next(4) {
            let (a, b) = (text(4, &mut next), text(4, &mut next));
            let edit = match next(8) {
                0 => Edit::replace(a, b),
                1 => Edit::delete(a),
                2 => Edit::insert_before(a, b),
                3 => Edit::insert_after(a, b),
                4 => Edit::insert_at(Start, b),
                5 => Edit::insert_at(End, b),
                6 => Edit::range(next(5), next(5), b),
                _ => Edit {
                    from: Some(RangeBound::Line(next(3))),
                    ..Edit::delete(a)
                },
            };
            edits.push(if next(3) == 0 { edit.all() } else { edit });
        }
        if let Ok(result) = apply_edits(&source, &edits) {
            assert_eq!(result.applied, result.changes.len());
        }
    }
}
