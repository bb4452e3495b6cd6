//! Images with no Python and no C library, made from Debian's
//! `busybox-static` package (no registry needed), for tests of what runs
//! on any image. Include with `#[path = "common/busybox.rs"] mod busybox;`
//! beside `mod common;`.

#![allow(dead_code)]

/// Debian's `busybox-static` binary, downloaded and unpacked into `dir`.
pub fn busybox_binary(dir: &std::path::Path) -> std::path::PathBuf {
    // apt downloads as its own user where it can write.
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let download = || {
        std::process::Command::new("apt-get")
            .args(["download", "-qq", "busybox-static"])
            .current_dir(dir)
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
    let deb = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .expect("the package");
    let root = dir.join("root");
    let unpacked = std::process::Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(&root)
        .status()
        .unwrap();
    assert!(unpacked.success(), "dpkg-deb -x");
    root.join("bin/busybox")
}

/// A build context under `dir` holding Debian's `busybox-static` binary as
/// `busybox`.
pub fn busybox_context(dir: &std::path::Path) -> std::path::PathBuf {
    let busybox = busybox_binary(dir);
    let context = dir.join("context");
    std::fs::create_dir_all(&context).unwrap();
    std::fs::copy(busybox, context.join("busybox")).unwrap();
    context
}

/// An image of Debian's `busybox-static` alone (a shell and the usual
/// tools as links to it; no C library, no interpreter), made once per
/// machine from the package.
pub fn busybox_image() -> String {
    let tag = "dockhand-test/busybox-static:1";
    if super::common::docker(&["images", "-q", tag])
        .trim()
        .is_empty()
    {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let context = busybox_context(dir.path());
        std::fs::write(
            context.join("Dockerfile"),
            "FROM scratch\nCOPY busybox /bin/busybox\n\
             RUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\n",
        )
        .unwrap();
        build_image(tag, "busybox", &context);
    }
    tag.to_string()
}

pub fn build_image(tag: &str, label: &str, context: &std::path::Path) {
    super::common::docker(&[
        "build",
        "-q",
        "--label",
        &format!("dev.dockhand.test={label}"),
        "-t",
        tag,
        &context.to_string_lossy(),
    ]);
}
