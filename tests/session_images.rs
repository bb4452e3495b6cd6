//! Sessions on images without Python: the static session agent needs
//! nothing from the image but a shell for commands. Tested on dockhand's
//! Debian base with `python3` removed, on an image holding only Debian's
//! `busybox-static`, and on an empty image (files only), against the real
//! daemon.

mod common;

use std::time::Duration;

use dockhand::session::{ExecEvent, ExecOptions, SessionApi, SessionConfig};
use dockhand::{Error, ImageSpec, State};
use futures::StreamExt;

/// An image of Debian's `busybox-static` alone (a shell and the usual
/// tools as links to it; no C library, no interpreter), made once per
/// machine from the package.
fn busybox_image() -> String {
    let tag = "dockhand-test/busybox-static:1";
    if common::docker(&["images", "-q", tag]).trim().is_empty() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        // apt downloads as its own user where it can write.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let download = || {
            std::process::Command::new("apt-get")
                .args(["download", "-qq", "busybox-static"])
                .current_dir(dir.path())
                .status()
                .is_ok_and(|s| s.success())
        };
        if !download() {
            let updated = std::process::Command::new("apt-get")
                .args(["update", "-qq"])
                .status()
                .is_ok_and(|s| s.success());
            assert!(updated && download(), "apt-get download busybox-static");
        }
        let deb = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "deb"))
            .expect("the package");
        let root = dir.path().join("root");
        let unpacked = std::process::Command::new("dpkg-deb")
            .arg("-x")
            .arg(&deb)
            .arg(&root)
            .status()
            .unwrap();
        assert!(unpacked.success(), "dpkg-deb -x");
        let context = dir.path().join("context");
        std::fs::create_dir_all(&context).unwrap();
        std::fs::copy(root.join("bin/busybox"), context.join("busybox")).unwrap();
        std::fs::write(
            context.join("Dockerfile"),
            "FROM scratch\nCOPY busybox /bin/busybox\n\
             RUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\n",
        )
        .unwrap();
        common::docker(&[
            "build",
            "-q",
            "--label",
            "dev.dockhand.test=busybox",
            "-t",
            tag,
            &context.to_string_lossy(),
        ]);
    }
    tag.to_string()
}

/// What every session does, on an image without `python3`.
async fn works_without_python(image: ImageSpec) {
    let client = common::client().await;
    let s = client.session(SessionConfig::new().image(image));
    s.start().await.expect("a session starts without python3");
    let r = s
        .exec("command -v python3 || echo no python; echo $HOME; id -u")
        .await
        .unwrap();
    assert_eq!(r.stdout, "no python\n/tmp\n65534\n", "{r:?}");
    let r = s
        .exec_with("cat; pwd", ExecOptions::new().stdin("in\n"))
        .await
        .unwrap();
    assert_eq!(r.stdout, "in\n/workspace\n");
    s.write_file("dir/notes.txt", b"hello").await.unwrap();
    assert_eq!(s.read_file("dir/notes.txt").await.unwrap(), b"hello");
    let names: Vec<String> = s
        .list_dir("dir")
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(names, ["notes.txt"]);
    assert!(matches!(
        s.read_file("/etc/hostname").await,
        Err(Error::SessionFile { .. })
    ));
    let mut stream = s
        .exec_stream("echo one; sleep 0.2; echo two >&2", ExecOptions::new())
        .await
        .unwrap();
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        events.push(event.unwrap());
    }
    assert!(matches!(events.first(), Some(ExecEvent::Stdout(b)) if &b[..] == b"one\n"));
    assert!(matches!(events.last(), Some(ExecEvent::Exit(r)) if r.exit_code == 0));
    let err = s
        .exec_with(
            "sleep 30",
            ExecOptions::new().timeout(Duration::from_millis(300)),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CommandTimeout { .. }), "{err:?}");
    assert_eq!(s.exec("echo alive").await.unwrap().stdout, "alive\n");
    common::check_terminal(&s).await;
    assert_eq!(s.state(), State::Idle);
    let id = s.describe().container_id.expect("a container");
    s.close().await.unwrap();
    common::wait_gone(&id).await;
}

/// An image with no file at all (made by importing an empty archive).
fn empty_image() -> String {
    let tag = "dockhand-test/empty:1";
    if common::docker(&["images", "-q", tag]).trim().is_empty() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let tar = dir.path().join("empty.tar");
        std::fs::write(&tar, [0u8; 1024]).unwrap();
        common::docker(&["import", &tar.to_string_lossy(), tag]);
    }
    tag.to_string()
}

#[tokio::test]
async fn an_image_without_a_shell_serves_files_and_says_why_commands_fail() {
    let client = common::client().await;
    let s = client.session(SessionConfig::new().image(ImageSpec::prebuilt(empty_image())));
    s.start()
        .await
        .expect("the agent needs nothing from the image");
    s.write_file("notes.txt", b"kept").await.unwrap();
    assert_eq!(s.read_file("notes.txt").await.unwrap(), b"kept");
    match s.exec("echo hi").await {
        Err(Error::SessionFile { message, .. }) => {
            assert!(message.contains("no /bin/sh"), "{message}")
        }
        other => panic!("expected the agent's refusal, got {other:?}"),
    }
    // The session still answers.
    assert_eq!(s.read_file("notes.txt").await.unwrap(), b"kept");
    let id = s.describe().container_id.expect("a container");
    s.close().await.unwrap();
    common::wait_gone(&id).await;
}

#[tokio::test]
async fn a_session_runs_on_debian_without_python() {
    // dockhand's Debian base, every python3 removed.
    let image = ImageSpec::default()
        .run("rm -f /usr/bin/python3* /usr/local/bin/python3* && ! command -v python3");
    works_without_python(image).await;
}

#[tokio::test]
async fn a_session_runs_on_an_image_of_busybox_alone() {
    works_without_python(ImageSpec::prebuilt(busybox_image())).await;
}
