//! Secret values never leave in part where a cap or a piece cuts them: not
//! in a failed run's error (its fields, its message, its `Debug`), not in a
//! run's captured text, not in live lines, not in a session's output.

mod common;

use std::sync::{Arc, Mutex};

use dockhand::session::{SessionApi as _, SessionConfig};
use dockhand::{CacheMode, RunOptions, Sandbox, Secret, NO_INPUTS};

const SECRET: &str = "AZq7Kx9WmPL3vR8tNc";
const LIMIT: usize = 64;

/// Panics if `text` holds 4 or more characters of the secret in a row.
fn assert_no_part(text: &str, context: &str) {
    for window in SECRET.as_bytes().windows(4) {
        let window = std::str::from_utf8(window).unwrap();
        assert!(
            !text.contains(window),
            "{context}: {window:?} of the secret in {text:?}"
        );
    }
}

/// A run that prints `pad` bytes, then the secret, then fails: with a
/// 64-byte cap, the cap falls at every offset of the secret in turn.
fn printer(pad: usize, stream: &str) -> Sandbox {
    Sandbox::command("redaction-cut", "sh")
        .args([
            "-c",
            &format!(
                "printf '%{pad}s' '' | tr ' ' x >&{fd}; printf %s \"$TOKEN\" >&{fd}; printf ' and more after it' >&{fd}; exit 3",
                fd = if stream == "stdout" { 1 } else { 2 }
            ),
        ])
        .secret(Secret::value("TOKEN", SECRET))
        .output_limit(LIMIT)
        .cache(CacheMode::Disable)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cap_through_a_secret_never_shows_part_of_it() {
    let client = common::client().await;
    let mut cases = Vec::new();
    for stream in ["stdout", "stderr"] {
        for pad in LIMIT + 1 - SECRET.len()..LIMIT {
            cases.push((stream, pad));
        }
    }
    let runs = cases.iter().map(|&(stream, pad)| {
        let client = client.clone();
        async move {
            let err = client
                .run(&printer(pad, stream), NO_INPUTS)
                .await
                .unwrap_err();
            (stream, pad, err)
        }
    });
    for (stream, pad, err) in futures::future::join_all(runs).await {
        let context = format!("{stream}, cap at offset {} of the secret", LIMIT - pad);
        let dockhand::Error::NonZeroExit {
            exit_code,
            stdout_tail,
            stderr_tail,
            ..
        } = &err
        else {
            panic!("{context}: {err:?}");
        };
        assert_eq!(*exit_code, 3);
        let tail = if stream == "stdout" {
            stdout_tail
        } else {
            stderr_tail
        };
        // The control: the run's output did reach the error, up to the cap.
        assert!(tail.starts_with(&"x".repeat(pad)), "{context}: {tail:?}");
        assert_no_part(stdout_tail, &context);
        assert_no_part(stderr_tail, &context);
        assert_no_part(&format!("{err:?}"), &context);
        assert_no_part(&err.to_string(), &context);
    }
    common::assert_no_container("redaction-cut");
}

#[tokio::test(flavor = "multi_thread")]
async fn live_pieces_of_a_long_line_never_show_a_secret_they_split() {
    let client = common::client().await;
    let piece = dockhand::LINE_PIECE;
    for offset in [1, 4, 9, 17] {
        // One line, no newline: the secret straddles the first piece's end.
        let job = Sandbox::command("redaction-pieces", "sh")
            .args([
                "-c",
                &format!(
                    "head -c {} /dev/zero | tr '\\0' y; printf %s \"$TOKEN\"; head -c 100000 /dev/zero | tr '\\0' z",
                    piece - offset
                ),
            ])
            .secret(Secret::value("TOKEN", SECRET))
            .cache(CacheMode::Disable)
            .build()
            .unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let options = RunOptions::new().on_output(move |line| sink.lock().unwrap().push(line));
        let out = client.run_with(&job, NO_INPUTS, options).await.unwrap();
        assert_no_part(&out.stdout.text, "captured stdout");
        let seen = seen.lock().unwrap();
        assert!(seen.len() >= 3, "a 165 KB line comes in pieces");
        // A redaction marker may stand where a few bytes stood.
        assert!(seen.iter().all(|l| l.line.len() <= piece + 64));
        assert!(seen[0].partial && !seen.last().unwrap().partial);
        for line in seen.iter() {
            assert_no_part(&line.line, &format!("piece split at {offset}"));
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_cap_through_a_secret_never_shows_part_of_it() {
    let client = common::client().await;
    let session = client.session(
        SessionConfig::new()
            .secret(Secret::value("TOKEN", SECRET))
            .output_limit(LIMIT),
    );
    session.start().await.unwrap();
    for pad in LIMIT + 1 - SECRET.len()..LIMIT {
        let out = session
            .exec(&format!(
                "printf '%{pad}s' '' | tr ' ' x; printf %s \"$TOKEN\"; echo after"
            ))
            .await
            .unwrap();
        assert!(out.stdout_truncated);
        assert!(out.stdout.starts_with(&"x".repeat(pad)), "{:?}", out.stdout);
        assert_no_part(&out.stdout, &format!("session cap at {}", LIMIT - pad));
    }
    session.close().await.unwrap();
}
