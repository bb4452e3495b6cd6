//! The detached session keeper holds none of its caller's descriptors: a
//! script that runs `dockhand session start` under a lock gets its lock back
//! when it lets go, not when the session closes.
//!
//! A test binary of its own: while the test's descriptor is inheritable,
//! any other test's child would inherit it too.

mod common;

use std::os::fd::AsRawFd;

use common::dockhand;

fn try_lock(file: &std::fs::File) -> bool {
    // SAFETY: flock on a descriptor this function borrows.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

#[test]
fn the_keeper_does_not_hold_the_callers_lock() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("caller.lock");
    let held = std::fs::File::create(&path).unwrap();
    assert!(try_lock(&held));
    // As a shell's `9>caller.lock` would pass it: inheritable.
    // SAFETY: clears FD_CLOEXEC on a descriptor this test owns.
    assert_eq!(
        unsafe { libc::fcntl(held.as_raw_fd(), libc::F_SETFD, 0) },
        0
    );
    let id = common::start_session();
    drop(held);
    let again = std::fs::File::open(&path).unwrap();
    let free = try_lock(&again);
    dockhand()
        .args(["session", "exec", &id, "echo alive"])
        .assert()
        .success()
        .stdout("alive\n");
    dockhand()
        .args(["session", "close", &id])
        .assert()
        .success();
    assert!(
        free,
        "the session keeper kept the caller's lock for the session's life"
    );
}
