//! Tracebacks show the user's code only: in auto-IO and verbatim mode, a
//! syntax error and a runtime error name `main.py` and the user's line, in
//! the error and in the captured stderr alike, and never dockhand's runner,
//! launcher or where it keeps the file.

mod common;

use dockhand::{Error, Sandbox};

/// What dockhand's own files would leave in a traceback.
const INTERNALS: [&str; 5] = [".dockhand", "<string>", "run.py", "verbatim.py", "_dh_"];

fn assert_user_frames_only(text: &str, line: usize) {
    assert!(
        text.contains(&format!("File \"main.py\", line {line}")),
        "the user's file and line: {text}"
    );
    for internal in INTERNALS {
        assert!(!text.contains(internal), "`{internal}` shown in: {text}");
    }
}

async fn failure(code: &str, verbatim: bool) -> (String, String) {
    let client = common::client().await;
    let mut sandbox = Sandbox::code("user-frames", code);
    if verbatim {
        sandbox = sandbox.verbatim();
    }
    match client
        .run(&sandbox.build().unwrap(), dockhand::NO_INPUTS)
        .await
    {
        Err(Error::NonZeroExit {
            exit_code: 1,
            python,
            stderr_tail,
            ..
        }) => (python.map(|p| p.traceback).unwrap_or_default(), stderr_tail),
        other => panic!("expected a failed run, got {other:?}"),
    }
}

#[tokio::test]
async fn runtime_errors_show_the_users_frames_in_both_modes() {
    let code = "def f(x):\n    return x / 0\n\nf(1)\n";
    for verbatim in [false, true] {
        let (traceback, stderr) = failure(code, verbatim).await;
        for text in [&traceback, &stderr] {
            assert_user_frames_only(text, 2);
            assert!(text.contains("File \"main.py\", line 4"), "{text}");
            assert!(text.contains("ZeroDivisionError"), "{text}");
        }
    }
    common::assert_no_container("user-frames");
}

#[tokio::test]
async fn syntax_errors_show_the_users_line_in_both_modes() {
    let code = "x = 1\ny = (x +\n";
    for verbatim in [false, true] {
        let (_, stderr) = failure(code, verbatim).await;
        assert_user_frames_only(&stderr, 2);
        assert!(stderr.contains("SyntaxError"), "{stderr}");
    }
    common::assert_no_container("user-frames");
}
