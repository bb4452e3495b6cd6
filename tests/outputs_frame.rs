//! Auto-IO value outputs taken from the runner's frame on stdout: the
//! program's own stdout untouched, nothing else in /var/outputs read, and the
//! download still there when the frame cannot arrive.

mod common;

use std::sync::{Arc, Mutex};

use dockhand::{RunOptions, Sandbox, StreamKind, Type};

/// Value outputs of auto-IO code come back over the stream already read
/// (no download): the program's own stdout must stay byte for byte what it
/// wrote, live lines included, and the outputs must be the same as ever.
#[tokio::test]
async fn auto_io_outputs_leave_the_program_s_stdout_untouched() {
    // The SDK's debug log says where the outputs came from (this test runs on
    // one thread, so a thread-local subscriber sees all of it).
    let (log, _guard) = common::LogCapture::debug_on_this_thread();
    let client = common::client().await;
    let sb = Sandbox::code(
        "frame",
        "print('first')\nprint('\u{e9}\\x1enot a frame\\x1e{}')\nprint('last, no newline', end='')\ny = x * 2\nname = 'caf\u{e9}'\n",
    )
    .input("x", Type::Int)
    .output("y", Type::Int)
    .output("name", Type::Str)
    .cache(dockhand::CacheMode::Disable)
    .build()
    .unwrap();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let seen = lines.clone();
    let options =
        RunOptions::new().on_output(move |l| seen.lock().unwrap().push((l.stream, l.line)));
    let out = client.run_with(&sb, [("x", 21)], options).await.unwrap();
    assert_eq!(out.get::<i64>("y").unwrap(), 42);
    assert_eq!(out.get::<String>("name").unwrap(), "café");
    let expected = "first\n\u{e9}\u{1e}not a frame\u{1e}{}\nlast, no newline";
    assert_eq!(out.stdout.text, expected);
    assert_eq!(out.stdout.total_bytes, expected.len());
    let live: Vec<String> = lines
        .lock()
        .unwrap()
        .iter()
        .filter(|(k, _)| *k == StreamKind::Stdout)
        .map(|(_, l)| l.clone())
        .collect();
    assert_eq!(
        live,
        [
            "first",
            "\u{e9}\u{1e}not a frame\u{1e}{}",
            "last, no newline"
        ]
    );
    // The outputs came with the frame, so nothing else in /var/outputs is
    // read at all: a FIFO there (which a download refuses) goes unnoticed.
    let fifo = Sandbox::code(
        "frame-fifo",
        "import os\nos.mkfifo('/var/outputs/pipe')\ny = x * 3\n",
    )
    .input("x", Type::Int)
    .output("y", Type::Int)
    .cache(dockhand::CacheMode::Disable)
    .build()
    .unwrap();
    let out = client.run(&fifo, [("x", 2)]).await.unwrap();
    let logged = log.text();
    assert_eq!(out.get::<i64>("y").unwrap(), 6);
    assert!(
        logged.contains("outputs taken from the runner's frame"),
        "the outputs were downloaded after all:\n{logged}"
    );
    // With stdout closed no frame can arrive: the outputs are downloaded.
    let closed = Sandbox::code("frame-closed", "import os\nos.close(1)\ny = x + 1\n")
        .input("x", Type::Int)
        .output("y", Type::Int)
        .cache(dockhand::CacheMode::Disable)
        .build()
        .unwrap();
    let out = client.run(&closed, [("x", 1)]).await.unwrap();
    assert_eq!(out.get::<i64>("y").unwrap(), 2);
    assert_eq!(out.stdout.total_bytes, 0);

    // Once the frame is in, the answer does not wait for the exit; what the
    // program wrote to stderr up to the end still all comes back, however
    // the daemon interleaves the two streams.
    let ended_at_frame = log
        .text()
        .matches("the runner's frame ended the run")
        .count();
    assert!(
        ended_at_frame >= 2,
        "no run ended at its frame:\n{}",
        log.text()
    );
    let noisy = Sandbox::code(
        "frame-stderr",
        "import sys\nfor i in range(2000):\n    sys.stderr.write('e%04d ' % i + 'x' * 40 + '\\n')\nsys.stderr.write('END')\ny = x\n",
    )
    .input("x", Type::Int)
    .output("y", Type::Int)
    .cache(dockhand::CacheMode::Disable)
    .build()
    .unwrap();
    for round in 0..5 {
        let out = client.run(&noisy, [("x", round)]).await.unwrap();
        assert_eq!(out.get::<i64>("y").unwrap(), round);
        assert_eq!(out.stderr.total_bytes, 2000 * 47 + 3, "round {round}");
        assert!(out.stderr.text.ends_with("\nEND"), "round {round}");
    }
    // A closed stderr sends no end marker: the run waits for the exit, as before.
    let no_stderr = Sandbox::code("frame-no-stderr", "import os\nos.close(2)\ny = x + 5\n")
        .input("x", Type::Int)
        .output("y", Type::Int)
        .cache(dockhand::CacheMode::Disable)
        .build()
        .unwrap();
    let before = log
        .text()
        .matches("the runner's frame ended the run")
        .count();
    let out = client.run(&no_stderr, [("x", 1)]).await.unwrap();
    assert_eq!(out.get::<i64>("y").unwrap(), 6);
    assert_eq!(
        log.text()
            .matches("the runner's frame ended the run")
            .count(),
        before
    );
}
