//! The few system calls the standard library does not wrap.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn check(result: libc::c_int) -> io::Result<libc::c_int> {
    if result < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(result)
    }
}

/// Keeps the session's commands (same user) out of `/proc/<agent>/fd`, its
/// memory and its environment.
pub fn make_undumpable() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    check(unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) }).map(drop)
}

/// A descriptor that becomes readable the moment `pid` exits, or `None`
/// (kernels before 5.3): then exits are seen by polling.
pub fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: the syscall takes a pid and flags and returns a new descriptor.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    // SAFETY: a non-negative result is a descriptor this process now owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Whether `fd` is readable within `wait`.
pub fn readable(fd: &impl AsRawFd, wait: Duration) -> bool {
    let mut poll = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = wait.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd for the duration of the call.
    let n = unsafe { libc::poll(&mut poll, 1, ms) };
    n > 0
}

/// SIGKILL (or `signal`) for a whole process group; a group that is gone
/// is no error.
pub fn kill_group(pgid: u32, signal: libc::c_int) {
    if pgid > 1 {
        // SAFETY: a plain kill(2) of a negative pid (a process group).
        unsafe { libc::kill(-(pgid as libc::pid_t), signal) };
    }
}

/// Whether any process is left in process group `pgid`.
pub fn group_alive(pgid: u32) -> bool {
    // SAFETY: kill(2) with signal 0 only checks that the group exists.
    pgid > 1 && unsafe { libc::kill(-(pgid as libc::pid_t), 0) } == 0
}

/// A signal for one process; a process that is gone is no error.
pub fn kill(pid: u32, signal: libc::c_int) {
    if pid > 1 {
        // SAFETY: a plain kill(2).
        unsafe { libc::kill(pid as libc::pid_t, signal) };
    }
}

/// Reaps `pid` if it has ended; never waits.
pub fn reap(pid: u32) {
    let mut status = 0;
    // SAFETY: waitpid on one pid with WNOHANG.
    unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WNOHANG) };
}

/// A new terminal: (master, slave).
pub fn openpty(rows: u16, cols: u16) -> io::Result<(OwnedFd, OwnedFd)> {
    let (mut master, mut slave) = (-1, -1);
    let size = window(rows, cols);
    // SAFETY: out-pointers to two ints and a valid winsize; no name buffer.
    check(unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    })?;
    // SAFETY: openpty succeeded: both are descriptors this process owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) })
}

fn window(rows: u16, cols: u16) -> libc::winsize {
    libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    }
}

/// A new size for the terminal whose master is `fd`.
pub fn set_window(fd: RawFd, rows: u16, cols: u16) -> io::Result<()> {
    let size = window(rows, cols);
    // SAFETY: TIOCSWINSZ reads one winsize.
    check(unsafe { libc::ioctl(fd, libc::TIOCSWINSZ, &size) }).map(drop)
}

/// In a forked child: a session of its own, and with a terminal on its
/// stdin, that terminal as its controlling one (job control works).
/// Async-signal-safe: two system calls.
pub fn new_session(take_terminal: bool) -> io::Result<()> {
    // SAFETY: setsid and ioctl on fd 0 in the child before exec.
    unsafe {
        check(libc::setsid())?;
        if take_terminal {
            check(libc::ioctl(0, libc::TIOCSCTTY, 0))?;
        }
    }
    Ok(())
}

/// Writes all of `data` to `fd`.
pub fn write_all(fd: RawFd, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        // SAFETY: writes from a live slice.
        let n = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        data = &data[n as usize..];
    }
    Ok(())
}

/// The text of an errno, as `strerror` gives it.
pub fn strerror(e: &io::Error) -> String {
    let text = e.to_string();
    // "No such file or directory (os error 2)" -> the first part.
    match text.rfind(" (os error ") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

static CHILD_ENDED: AtomicBool = AtomicBool::new(true);

extern "C" fn on_child(_: libc::c_int) {
    CHILD_ENDED.store(true, Ordering::SeqCst);
}

/// Notes each SIGCHLD (a child or an orphan handed to the agent ended),
/// restarting the calls it interrupts; commands start with the default.
pub fn watch_children() -> io::Result<()> {
    // SAFETY: a handler that only stores to an atomic; the struct is
    // zeroed and filled before the call.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_child as *const () as usize;
        action.sa_flags = libc::SA_RESTART | libc::SA_NOCLDSTOP;
        libc::sigemptyset(&mut action.sa_mask);
        check(libc::sigaction(
            libc::SIGCHLD,
            &action,
            std::ptr::null_mut(),
        ))
        .map(drop)
    }
}

/// Whether a child ended since the last call.
pub fn children_ended() -> bool {
    CHILD_ENDED.swap(false, Ordering::SeqCst)
}

/// Makes closing `fd` (a TCP socket) reset the connection at once, rather
/// than leave the peer to find out at its next window probe (up to two
/// minutes for a sender that filled the window).
pub fn reset_on_close(fd: RawFd) -> io::Result<()> {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt with a linger struct of the size given.
    check(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    })
    .map(drop)
}
