# How the session agent waits for commands and gives them terminals.
# Embedded between pids.py and agent.py, one program with them (see
# sdk/src/session/live/mod.rs).

import fcntl
import os
import select
import struct
import subprocess
import termios


def open_pidfd(pid):
    """A descriptor that becomes readable the moment `pid` exits (Linux 5.3
    and later), or None: then exits are seen by polling."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def exited(proc, pidfd, wait):
    """Whether the command ended within `wait` seconds. With a pidfd the
    answer comes at the exit itself; Popen's own timed wait polls with
    sleeps of up to 50 ms, which a quick command would pay in full."""
    if pidfd is not None:
        readable, _, _ = select.select([pidfd], [], [], wait)
        if not readable:
            return False
        proc.wait()
        return True
    try:
        proc.wait(timeout=wait)
        return True
    except subprocess.TimeoutExpired:
        return False


# Exec id -> the master side of a command's terminal.
_terminals = {}


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def set_window(fd, size):
    rows, cols = int(size.get("rows") or 24), int(size.get("cols") or 80)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


def take_terminal():
    """In the child, after setsid: its terminal becomes the controlling one."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def resize(req):
    """Runs on the reading thread; a command without a terminal is ignored."""
    fd = _terminals.get(req.get("id"))
    if fd is not None:
        try:
            set_window(fd, req)
        except OSError:
            pass


