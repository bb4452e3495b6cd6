//! Unit tests of collecting and parsing outputs, on archives built here.

use super::*;

fn p(name: &str, ty: Type) -> Param {
    Param {
        name: name.into(),
        ty,
    }
}

/// A tar like the daemon sends for `/var/outputs`.
fn archive(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o755);
    dir.set_size(0);
    b.append_data(&mut dir, "outputs/", std::io::empty())
        .unwrap();
    build(&mut b);
    b.into_inner().unwrap()
}

fn file(b: &mut tar::Builder<Vec<u8>>, path: &str, data: &[u8]) {
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    b.append_data(&mut h, path, data).unwrap();
}

fn link(b: &mut tar::Builder<Vec<u8>>, path: &str, target: &str) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    b.append_link(&mut h, path, target).unwrap();
}

fn hard_link(b: &mut tar::Builder<Vec<u8>>, path: &str, target: &str) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Link);
    h.set_size(0);
    b.append_link(&mut h, path, target).unwrap();
}

#[test]
fn hard_links_stay_within_their_output() {
    let tar = archive(|b| {
        dir(b, "outputs/tree/");
        file(b, "outputs/tree/a", b"same");
        hard_link(b, "outputs/tree/b", "outputs/tree/a");
    });
    let got = collect(&tar[..], &[p("tree", Type::Dir)], 1 << 20).unwrap();
    let root = got.dir.as_ref().unwrap().path().join("tree");
    assert_eq!(std::fs::read(root.join("b")).unwrap(), b"same");
    for target in ["outputs/other/a", "outputs/../etc/passwd", "/etc/passwd"] {
        let tar = archive(|b| {
            file(b, "outputs/other/a", b"secret");
            dir(b, "outputs/tree/");
            hard_link(b, "outputs/tree/b", target);
        });
        let declared = [p("tree", Type::Dir), p("other", Type::Dir)];
        assert!(
            matches!(
                collect(&tar[..], &declared, 1 << 20),
                Err(Error::UnsafeArchivePath { .. })
            ),
            "{target}"
        );
    }
}

fn dir(b: &mut tar::Builder<Vec<u8>>, path: &str) {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o755);
    h.set_size(0);
    b.append_data(&mut h, path, std::io::empty()).unwrap();
}

#[test]
fn the_outputs_limit_names_what_crossed_it() {
    let tar = archive(|b| {
        file(b, "outputs/small", b"1234");
        file(b, "outputs/undeclared", b"12345678");
    });
    let declared = [p("small", Type::File)];
    assert!(collect(&tar[..], &declared, 12).is_ok());
    match collect(&tar[..], &declared, 11) {
        Err(Error::OutputTooLarge { name, limit_bytes }) => {
            assert_eq!((name.as_str(), limit_bytes), ("undeclared", 11))
        }
        other => panic!("expected OutputTooLarge, got {other:?}"),
    }
}

#[test]
fn scalars_files_and_dirs_are_collected() {
    let tar = archive(|b| {
        file(b, "outputs/n", b"42");
        file(b, "outputs/report.txt", b"ignored: undeclared");
        file(b, "outputs/rep", b"<xml/>");
        dir(b, "outputs/tree/");
        file(b, "outputs/tree/a/b.txt", b"deep");
        link(b, "outputs/tree/link", "a/b.txt");
        file(
            b,
            "outputs/.dockhand/status.json",
            b"{\"unassigned\": [\"x\"]}",
        );
    });
    let declared = [
        p("n", Type::Int),
        p("rep", Type::File),
        p("tree", Type::Dir),
    ];
    let collected = collect(&tar[..], &declared, u64::MAX).unwrap();
    assert_eq!(
        collected.status.as_ref().unwrap().unassigned,
        Some(vec!["x".to_string()])
    );
    let mut out = parse(collected, &declared).unwrap();
    assert_eq!(out.get::<i64>("n").unwrap(), 42);
    let rep: PathBuf = out.get("rep").unwrap();
    assert_eq!(std::fs::read(&rep).unwrap(), b"<xml/>");
    let tree: PathBuf = out.get("tree").unwrap();
    assert_eq!(
        std::fs::read_to_string(tree.join("a/b.txt")).unwrap(),
        "deep"
    );
    assert_eq!(std::fs::read_to_string(tree.join("link")).unwrap(), "deep");
    let kept = out.keep().unwrap();
    drop(out);
    assert!(kept.join("rep").exists());
    std::fs::remove_dir_all(kept).unwrap();
}

#[test]
fn outputs_dir_is_removed_on_drop() {
    let tar = archive(|b| file(b, "outputs/rep", b"x"));
    let declared = [p("rep", Type::File)];
    let out = parse(collect(&tar[..], &declared, u64::MAX).unwrap(), &declared).unwrap();
    let dir = out.dir().unwrap().to_path_buf();
    assert!(dir.exists());
    drop(out);
    assert!(!dir.exists());
}

#[test]
fn escaping_paths_are_refused() {
    let declared = [p("tree", Type::Dir), p("rep", Type::File)];
    let cases: Vec<Vec<u8>> = vec![
        archive(|b| {
            dir(b, "outputs/tree/");
            link(b, "outputs/tree/up", "../../etc");
        }),
        archive(|b| {
            dir(b, "outputs/tree/");
            link(b, "outputs/tree/abs", "/etc/passwd");
        }),
        archive(|b| link(b, "outputs/rep", "/etc/passwd")),
        archive(|b| {
            dir(b, "outputs/tree/");
            link(b, "outputs/tree/l", "sub");
            file(b, "outputs/tree/l/f", b"through the link");
        }),
    ];
    for tar in cases {
        let err = collect(&tar[..], &declared, u64::MAX).unwrap_err();
        assert!(matches!(err, Error::UnsafeArchivePath { .. }), "{err}");
    }
    // `..` in entry names: the tar crate refuses to write such names, so
    // patch the bytes of a header after the fact.
    let mut tar = archive(|b| file(b, "outputs/XX/XX/escape", b"x"));
    let pos = tar.windows(12).position(|w| w == b"outputs/XX/X").unwrap();
    tar[pos + 8..pos + 13].copy_from_slice(b"../..");
    let header_start = pos - pos % 512;
    let mut header = tar::Header::new_old();
    header
        .as_mut_bytes()
        .copy_from_slice(&tar[header_start..header_start + 512]);
    header.set_cksum();
    tar[header_start..header_start + 512].copy_from_slice(header.as_bytes());
    let err = collect(&tar[..], &[p("escape", Type::File)], u64::MAX).unwrap_err();
    assert!(matches!(err, Error::UnsafeArchivePath { .. }), "{err}");
}

#[test]
fn missing_and_bad_outputs_are_named() {
    let declared = [p("n", Type::Int)];
    let err = parse(
        collect(&archive(|_| {})[..], &declared, u64::MAX).unwrap(),
        &declared,
    )
    .unwrap_err();
    assert!(matches!(err, Error::MissingOutput { ref name } if name == "n"));
    let tar = archive(|b| file(b, "outputs/n", b"forty-two"));
    let err = parse(collect(&tar[..], &declared, u64::MAX).unwrap(), &declared).unwrap_err();
    assert!(
        matches!(err, Error::BadOutput { ref name, ref got, .. } if name == "n" && got == "forty-two"),
        "{err}"
    );
}

#[test]
fn tuples_in_declared_order() {
    let out = Outputs::new(
        vec![
            ("a".into(), Value::Int(1)),
            ("b".into(), Value::Str("x".into())),
        ],
        None,
    );
    let (a, b): (i64, String) = out.tuple().unwrap();
    assert_eq!((a, b.as_str()), (1, "x"));
    assert!(out.tuple::<(i64,)>().is_err());
    assert!(out.get::<String>("a").is_err());
}

#[test]
fn a_typo_and_a_wrong_rust_type_are_the_caller_s_errors() {
    let outputs = Outputs::new(
        vec![
            ("result".into(), Value::Int(42)),
            ("report".into(), Value::Str("ok".into())),
        ],
        None,
    );
    let err = outputs.get::<i64>("reslt").unwrap_err();
    match &err {
        Error::UnknownOutput {
            name,
            declared,
            suggestion,
        } => {
            assert_eq!(name, "reslt");
            assert_eq!(declared, &["result", "report"]);
            assert_eq!(suggestion.as_deref(), Some("result"));
        }
        other => panic!("expected UnknownOutput, got {other:?}"),
    }
    assert!(err.to_string().contains("did you mean `result`?"), "{err}");
    let err = outputs.get::<String>("result").unwrap_err();
    assert!(
        matches!(&err, Error::OutputType { name, hint, .. } if name == "result" && hint == "i64"),
        "{err:?}"
    );
    assert!(
        !err.is_retryable(),
        "the calling code is wrong, not the run"
    );
    assert!(err.to_string().contains("ask for i64"), "{err}");
}

#[test]
fn a_frame_stands_for_the_outputs_only_within_the_limit() {
    let declared = [p("y", Type::Int), p("s", Type::Str)];
    let frame = br#"{"outputs": {"y": "42", "s": "hi"}, "bytes": 4}"#;
    let got = from_frame(frame, &declared, 100).expect("a good frame");
    assert_eq!(
        got.texts,
        vec![
            ("y".to_string(), b"42".to_vec()),
            ("s".to_string(), b"hi".to_vec())
        ]
    );
    // The size of /var/outputs it states is over the limit.
    let big = br#"{"outputs": {"y": "42", "s": "hi"}, "bytes": 101}"#;
    assert!(from_frame(big, &declared, 100).is_none());
    // It understates that size, but its own texts are over the limit.
    let lying = format!(
        r#"{{"outputs": {{"y": "1", "s": "{}"}}, "bytes": 0}}"#,
        "x".repeat(200)
    );
    assert!(from_frame(lying.as_bytes(), &declared, 100).is_none());
    // An output missing, an extra field, not JSON.
    assert!(from_frame(br#"{"outputs": {"y": "1"}, "bytes": 1}"#, &declared, 100).is_none());
    assert!(from_frame(br#"{"outputs": {}, "bytes": 0, "x": 1}"#, &[], 100).is_none());
    assert!(from_frame(b"not json", &declared, 100).is_none());
}
