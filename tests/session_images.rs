//! Sessions on images without Python: the static session agent needs
//! nothing from the image but a shell for commands. Tested on dockhand's
//! Debian base with `python3` removed, on an image holding only Debian's
//! `busybox-static`, on an Alpine-like image (busybox and musl's C library,
//! from Debian's packages), and on an empty image (files only), against the
//! real daemon.

#[path = "common/busybox.rs"]
mod busybox;
mod common;

use std::time::Duration;

use busybox::{build_image, busybox_context, busybox_image};
use dockhand::session::{ExecEvent, ExecOptions, SessionApi, SessionConfig, AGENT_FROM_IMAGE_ENV};
use dockhand::{Error, ImageSpec, State};
use futures::StreamExt;

/// A program that says which dynamic loader it runs under.
const LOADER_PROBE: &str = r#"#include <stdio.h>
#include <string.h>
int main(void) {
    FILE *maps = fopen("/proc/self/maps", "r");
    char line[512];
    while (maps && fgets(line, sizeof line, maps))
        if (strstr(line, "ld-musl")) { printf("loaded by %s", strchr(line, '/')); return 0; }
    puts("no musl loader");
    return 1;
}
"#;

/// An Alpine-like image made from Debian's packages: busybox and musl's C
/// library as the only libc, with a program dynamically linked against it
/// (built here with Debian's `musl-gcc`).
fn musl_image() -> String {
    let tag = "dockhand-test/musl-busybox:1";
    if common::docker(&["images", "-q", tag]).trim().is_empty() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let context = busybox_context(dir.path());
        std::fs::copy(
            "/lib/x86_64-linux-musl/libc.so",
            context.join("ld-musl-x86_64.so.1"),
        )
        .expect("musl's C library (apt-get install musl-tools)");
        let source = dir.path().join("probe.c");
        std::fs::write(&source, LOADER_PROBE).unwrap();
        let built = std::process::Command::new("musl-gcc")
            .arg("-o")
            .arg(context.join("musl-probe"))
            .arg(&source)
            .status()
            .expect("musl-gcc runs (apt-get install musl-tools)");
        assert!(built.success(), "musl-gcc");
        std::fs::write(
            context.join("Dockerfile"),
            "FROM scratch\nCOPY busybox /bin/busybox\n\
             COPY ld-musl-x86_64.so.1 /lib/ld-musl-x86_64.so.1\n\
             COPY musl-probe /usr/bin/musl-probe\n\
             RUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\n",
        )
        .unwrap();
        build_image(tag, "musl", &context);
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
async fn a_session_runs_on_an_alpine_like_musl_image() {
    let image = musl_image();
    let client = common::client().await;
    let s = client.session(SessionConfig::new().image(ImageSpec::prebuilt(image.clone())));
    s.start().await.unwrap();
    let r = s.exec("musl-probe; ls /lib").await.unwrap();
    assert_eq!(
        r.stdout, "loaded by /lib/ld-musl-x86_64.so.1\nld-musl-x86_64.so.1\n",
        "a musl program runs and musl is the image's only C library: {r:?}"
    );
    s.close().await.unwrap();
    works_without_python(ImageSpec::prebuilt(image)).await;
}

#[tokio::test]
async fn a_session_runs_on_an_image_of_busybox_alone() {
    works_without_python(ImageSpec::prebuilt(busybox_image())).await;
}

/// How a daemon of another platform than the SDK's gets the agent: from
/// its own image (`dockhand/agent`, here the one made of the SDK's binary),
/// read out once per process. Run in a child process of its own, since the
/// switch is an environment variable.
#[tokio::test]
async fn the_agent_read_from_its_image_serves_as_on_another_platform() {
    let name = "the_agent_read_from_its_image_serves_as_on_another_platform";
    if std::env::var_os(AGENT_FROM_IMAGE_ENV).is_none() {
        let status = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", name, "--nocapture"])
            .env(AGENT_FROM_IMAGE_ENV, "1")
            .status()
            .unwrap();
        assert!(status.success(), "the child run failed: {status}");
        return;
    }
    let listed = || common::docker(&["images", "-q", "dockhand/agent"]);
    let images: Vec<String> = listed().split_whitespace().map(String::from).collect();
    if !images.is_empty() {
        let mut args = vec!["rmi", "-f"];
        args.extend(images.iter().map(String::as_str));
        common::docker(&args);
    }
    works_without_python(ImageSpec::prebuilt(busybox_image())).await;
    assert!(
        !listed().trim().is_empty(),
        "the session's start made the agent's image to read it from"
    );
    let made = common::client().await.session_agent_image().await.unwrap();
    let entrypoint = common::docker(&[
        "image",
        "inspect",
        "-f",
        "{{json .Config.Entrypoint}}",
        &made,
    ]);
    assert_eq!(entrypoint.trim(), r#"["/dockhand-agent"]"#);
}
