"""dockhand session agent: the main process of an interactive session's container.

Speaks JSON lines on stdin/stdout with the host (see sdk/src/session/protocol.rs).
Requests carry an `id`; every reply echoes it. Requests run on their own
threads, so a long command does not hold up a file read.

  host -> agent  {"type": "exec", "id", "command", "cwd", "env", "stdin", "timeout_s", "output_limit", "stream"}
                 {"type": "read", "id", "path"}
                 {"type": "write", "id", "path", "data", "mode", "offset"}
                 {"type": "list", "id", "path"}
                 {"type": "remove", "id", "path", "recursive"}
                 {"type": "input", "id", "data", "close"}   (to an exec with "keep_stdin")
                 {"type": "signal", "id", "signal"}         (to a running exec's process group)
                 {"type": "resize", "id", "rows", "cols"}   (an exec's terminal, started with "pty")
                 {"type": "stat", "id", "path"}
                 {"type": "mkdir", "id", "path"}
                 {"type": "move", "id", "path", "destination"}
                 {"type": "channels", "id"}                 (the running execs with "keep_stdin": id, command)
                 {"type": "hello"}                          (answered with another "ready", with the
                                                             next request id no earlier host used)
  agent -> host  {"type": "ready"}
                 {"type": "started", "id", "pid"}   (an exec with "report_pid", before its output)
                 {"type": "chunk", "id", "stream": "stdout" | "stderr", "data"}
                 {"type": "exit", "id", "code", "stdout", "stderr", "stdout_truncated", "stderr_truncated", "timed_out"}
                 {"type": "ok", "id", ...}
                 {"type": "error", "id", "kind", "message"}

Binary data travels base64-encoded. Paths are resolved against the workspace
and must stay under one of the allowed roots, symbolic links included.
"""

import base64
import ctypes
import errno
import json
import os
import queue
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
import uuid

WORKSPACE = os.environ.get("DOCKHAND_WORKSPACE", "/workspace")
ROOTS = [r for r in os.environ.get("DOCKHAND_ROOTS", WORKSPACE).split(":") if r]

_out_lock = threading.Lock()
# Pids of the commands running now (their Popen waits for them).
_commands = set()
_commands_lock = threading.Lock()


def send(msg):
    data = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
    with _out_lock:
        view = memoryview(data)
        while view:
            n = os.write(1, view)
            view = view[n:]


class Refused(Exception):
    def __init__(self, kind, message):
        super().__init__(message)
        self.kind = kind


def resolve(path):
    """Absolute, symlink-free path under an allowed root, or Refused."""
    full = path if os.path.isabs(path) else os.path.join(WORKSPACE, path)
    real = os.path.realpath(full)
    for root in ROOTS:
        root_real = os.path.realpath(root)
        if real == root_real or real.startswith(root_real.rstrip("/") + "/"):
            return real
    raise Refused("outside", "%s is outside the session's allowed paths (%s)" % (path, ", ".join(ROOTS)))


def os_error(path, e):
    kinds = {2: "not_found", 20: "not_a_directory", 21: "is_a_directory", 13: "permission", 30: "read_only", 39: "not_empty"}
    return Refused(kinds.get(e.errno, "io"), "%s: %s" % (path, e.strerror))


def b64(data):
    return base64.b64encode(data).decode()


def do_exec(req):
    rid = req["id"]
    limit = int(req.get("output_limit", 1 << 20))
    stream = bool(req.get("stream"))
    env = dict(os.environ)
    env.pop("DOCKHAND_ROOTS", None)
    env.update(req.get("env") or {})
    cwd = resolve(req.get("cwd") or WORKSPACE)
    stdin = base64.b64decode(req["stdin"]) if req.get("stdin") is not None else None
    keep_stdin = bool(req.get("keep_stdin"))
    refused_before = fork_refusals()
    size = req.get("pty")
    terminal = {}

    def spawn():
        with _commands_lock:
            if size:
                # A terminal: one stream in and out, the command its
                # session's controlling terminal (job control works).
                master, slave = os.openpty()
                try:
                    set_window(master, size)
                    proc = subprocess.Popen(
                        ["/bin/sh", "-c", req["command"]], cwd=cwd, env=env,
                        stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                        preexec_fn=take_terminal,
                    )
                except BaseException:
                    os.close(master)
                    raise
                finally:
                    os.close(slave)
                terminal["fd"] = master
            else:
                proc = subprocess.Popen(
                    ["/bin/sh", "-c", req["command"]], cwd=cwd, env=env,
                    stdin=subprocess.PIPE if stdin is not None or keep_stdin else subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                )
            _commands.add(proc.pid)
        return proc

    proc = with_pids(spawn)
    master = terminal.get("fd")
    _groups[rid] = proc.pid
    if keep_stdin and master is None:
        _channels[rid] = req["command"]
    if master is not None:
        _terminals[rid] = master
    try:
        # Its input queue exists before anyone learns the pid: the host
        # sends input (and the close) as soon as `started` arrives, and the
        # reading thread drops input for an id it does not know.
        if master is not None:
            feed_inputs(rid, lambda data: write_all(master, data), lambda: None)
        elif keep_stdin:
            feed_inputs(rid, lambda data: (proc.stdin.write(data), proc.stdin.flush()), proc.stdin.close)
            stdin = None
        if req.get("report_pid"):
            send({"type": "started", "id": rid, "pid": proc.pid})
        run_command(req, rid, proc, stdin, limit, stream, refused_before, master)
    except BaseException:
        # Could not watch the command (no thread to read it, say, when it
        # used up every pid): end it and all it started, now.
        kill_group(proc.pid)
        proc.wait()
        raise
    finally:
        _commands.discard(proc.pid)
        _groups.pop(rid, None)
        _channels.pop(rid, None)
        if _terminals.pop(rid, None) is not None:
            os.close(master)
        pending = _inputs.get(rid)
        if pending is not None:
            pending.put(None)


def run_command(req, rid, proc, stdin, limit, stream, refused_before, master=None):
    kept = {"stdout": bytearray(), "stderr": bytearray()}
    cut = {"stdout": False, "stderr": False}

    def pump(name, fd):
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                # A terminal whose last writer is gone reads EIO: its end.
                break
            if not chunk:
                break
            room = limit - len(kept[name])
            if room > 0:
                kept[name] += chunk[:room]
            if len(chunk) > room:
                cut[name] = True
            if stream:
                send({"type": "chunk", "id": rid, "stream": name, "data": b64(chunk)})

    # A terminal's output counts as stdout: it is one stream.
    streams = [("stdout", master)] if master is not None else [("stdout", proc.stdout.fileno()), ("stderr", proc.stderr.fileno())]
    readers = [threading.Thread(target=pump, args=(n, fd), daemon=True) for n, fd in streams]
    for t in readers:
        with_pids(t.start)
    if stdin is not None:
        def feed():
            try:
                proc.stdin.write(stdin)
                proc.stdin.close()
            except OSError:
                pass
        threading.Thread(target=feed, daemon=True).start()
    timeout = req.get("timeout_s")
    deadline = time.monotonic() + timeout if timeout is not None else None
    timed_out = False
    pidfd = open_pidfd(proc.pid)
    try:
        while True:
            # In short waits: a command whose forks the pids limit refuses is
            # ended at once, even if it fell apart and one process waits on.
            left = None if deadline is None else deadline - time.monotonic()
            if exited(proc, pidfd, 0.1 if left is None else max(0.0, min(0.1, left))):
                break
            if left is not None and left <= 0:
                timed_out = True
            elif fork_refusals() > refused_before:
                _exhausted.add(proc.pid)
            else:
                continue
            kill_group(proc.pid)
            proc.wait()
            break
    finally:
        if pidfd is not None:
            os.close(pidfd)
    if not timed_out and deadline is not None:
        # What the command left running in its process group (background
        # jobs, a fork bomb's remains) lives until the command's time limit.
        threading.Thread(target=kill_group_at, args=(proc.pid, deadline), daemon=True).start()
    for t in readers:
        # Background children may keep the pipes open; do not wait for them forever.
        t.join(timeout=0.5 if timed_out else 5)
    if near_pids_limit() and (proc.returncode != 0 or group_size(proc.pid) > 0):
        # Ended, but what it started holds the pids (its shell may have
        # exited for want of a fork before the watch saw it). A command that
        # succeeded and left nothing is not to blame for pids others still
        # hold (a bomb's remains being ended as it ran).
        contain_exhaustion(first=proc.pid)
    elif proc.returncode != 0 and fork_refusals() > refused_before:
        # The limit refused forks while it ran, and it has already fallen
        # apart (each part that could not fork gave up): still its doing.
        _exhausted.add(proc.pid)
        kill_group(proc.pid)
    exhausted = proc.pid in _exhausted
    _exhausted.discard(proc.pid)
    if exhausted:
        # Answer once the processes are gone, so the next request finds
        # its pids free.
        settle_group(proc.pid)
    send({
        "type": "exit", "id": rid, "code": proc.returncode, "timed_out": timed_out,
        "stdout": b64(bytes(kept["stdout"])), "stderr": b64(bytes(kept["stderr"])),
        "stdout_truncated": cut["stdout"], "stderr_truncated": cut["stderr"],
        "pids_exhausted": exhausted,
    })


# Exec id -> process group of a command still running (for `signal`).
_groups = {}

# Exec id -> queue of `input` data for a command that keeps its stdin open.
_inputs = {}

# Exec id -> command, of the commands a host talks to over their stdin
# (channels: a kernel relay, say). A host that attaches later finds them
# here, as the agent started them: nothing a command wrote says so.
_channels = {}


def do_channels(req):
    return {"channels": [{"id": rid, "command": command} for rid, command in list(_channels.items())]}


def feed_inputs(rid, write, close):
    """Writes `input` requests to the command's stdin (or terminal) in the
    order they came, on a thread of its own: a command that stops reading
    blocks only that."""
    pending = queue.SimpleQueue()
    _inputs[rid] = pending

    def feed():
        try:
            while True:
                data = pending.get()
                if data is None:
                    break
                write(data)
        except OSError:
            pass
        finally:
            _inputs.pop(rid, None)
            try:
                close()
            except OSError:
                pass

    threading.Thread(target=feed, daemon=True).start()


def queue_input(req):
    """Runs on the reading thread, so inputs keep their order."""
    pending = _inputs.get(req.get("id"))
    if pending is None:
        return
    if req.get("data"):
        pending.put(base64.b64decode(req["data"]))
    if req.get("close"):
        pending.put(None)


def signal_group(req):
    """Runs on the reading thread: a signal for a command that has ended
    (or never was) is a no-op, never a signal to a reused pid."""
    pgid = _groups.get(req.get("id"))
    sig = int(req.get("signal") or signal.SIGKILL)
    if pgid is None or sig not in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        return
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_group(pgid):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_group_at(pgid, deadline):
    time.sleep(max(0.0, deadline - time.monotonic()))
    kill_group(pgid)


def do_read(req):
    path = resolve(req["path"])
    limit = int(req.get("max_bytes") or (64 << 20))
    try:
        # Sockets cannot be opened at all: tell them apart first. The type is
        # checked again on the open descriptor, which is what is read.
        if not stat.S_ISREG(os.stat(path).st_mode) and not os.path.isdir(path):
            raise Refused("not_a_file", "%s is not a regular file (a FIFO, socket or device); only regular files are read" % req["path"])
        # Non-blocking, so a FIFO swapped in meanwhile cannot hold the request.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise os_error(req["path"], e)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise Refused("is_a_directory", "%s is a directory" % req["path"])
        if not stat.S_ISREG(st.st_mode):
            raise Refused("not_a_file", "%s is not a regular file (a FIFO, socket or device); only regular files are read" % req["path"])
        if st.st_size > limit:
            raise Refused("too_large", "%s is %d bytes; the limit is %d bytes" % (req["path"], st.st_size, limit))
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            size += len(chunk)
            if size > limit:
                raise Refused("too_large", "%s grew past the limit of %d bytes while being read" % (req["path"], limit))
            chunks.append(chunk)
    except OSError as e:
        raise os_error(req["path"], e)
    finally:
        os.close(fd)
    return {"data": b64(b"".join(chunks))}


def do_write(req):
    path = resolve(req["path"])
    parent = os.path.dirname(path)
    if req.get("offset") is not None:
        # A piece of a streamed upload, at its place in the file: pieces may
        # arrive in any order (each request runs on a thread of its own).
        # Only the first makes the file: a piece still on its way when an
        # upload was abandoned (and its file removed) does not bring it back.
        data = base64.b64decode(req["data"])
        at = int(req["offset"])
        flags = os.O_WRONLY | os.O_NOFOLLOW | (os.O_CREAT | os.O_TRUNC if at == 0 else 0)
        try:
            if at == 0:
                os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, flags, 0o644)
            try:
                view = memoryview(data)
                while view:
                    n = os.pwrite(fd, view, at)
                    view, at = view[n:], at + n
            finally:
                os.close(fd)
        except OSError as e:
            raise os_error(req["path"], e)
        return {}
    try:
        os.makedirs(parent, exist_ok=True)
        tmp = os.path.join(parent, ".%s.dockhand-%s" % (os.path.basename(path), uuid.uuid4().hex[:8]))
        with open(tmp, "wb") as f:
            f.write(base64.b64decode(req["data"]))
        if req.get("mode") is not None:
            os.chmod(tmp, int(req["mode"]))
        elif os.path.exists(path):
            shutil.copymode(path, tmp)
        os.replace(tmp, path)
    except OSError as e:
        try:
            os.unlink(tmp)
        except (OSError, UnboundLocalError):
            pass
        raise os_error(req["path"], e)
    return {}


def do_list(req):
    path = resolve(req.get("path") or ".")
    try:
        names = sorted(os.listdir(path))
    except OSError as e:
        raise os_error(req.get("path") or ".", e)
    entries = []
    for name in names:
        full = os.path.join(path, name)
        try:
            st = os.lstat(full)
        except OSError:
            continue
        if os.path.islink(full):
            kind = "link"
        elif os.path.isdir(full):
            kind = "dir"
        elif os.path.isfile(full):
            kind = "file"
        else:
            kind = "other"
        entries.append({"name": name, "kind": kind, "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    return {"entries": entries}


def do_remove(req):
    path = resolve(req["path"])
    if path in [os.path.realpath(r) for r in ROOTS]:
        raise Refused("outside", "refusing to remove the root %s itself" % req["path"])
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            if req.get("recursive"):
                shutil.rmtree(path)
            else:
                os.rmdir(path)
        else:
            os.unlink(path)
    except OSError as e:
        raise os_error(req["path"], e)
    return {}


def entry_of(path, st):
    kind = "link" if stat.S_ISLNK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
    entry = {
        "name": os.path.basename(path) or "/", "path": path, "kind": kind, "size": st.st_size,
        "mode": stat.S_IMODE(st.st_mode), "uid": st.st_uid, "gid": st.st_gid, "mtime": st.st_mtime,
    }
    if kind == "link":
        try:
            entry["target"] = os.readlink(path)
        except OSError:
            pass
    return entry


def do_stat(req):
    path = resolve(req["path"])
    try:
        return {"entry": entry_of(path, os.lstat(path))}
    except OSError as e:
        raise os_error(req["path"], e)


def do_mkdir(req):
    path = resolve(req["path"])
    try:
        os.makedirs(path)
        created = True
    except FileExistsError:
        if not os.path.isdir(path):
            raise Refused("exists", "%s exists and is not a directory" % req["path"])
        created = False
    except OSError as e:
        raise os_error(req["path"], e)
    return {"created": created, "entry": entry_of(path, os.lstat(path))}


def do_move(req):
    source = resolve(req["path"])
    destination = resolve(req["destination"])
    if source in [os.path.realpath(r) for r in ROOTS]:
        raise Refused("outside", "refusing to move the root %s itself" % req["path"])
    try:
        os.makedirs(os.path.dirname(destination), exist_ok=True)
        os.rename(source, destination)
        return {"entry": entry_of(destination, os.lstat(destination))}
    except OSError as e:
        raise os_error(req["path"], e)


HANDLERS = {"read": do_read, "write": do_write, "list": do_list, "remove": do_remove,
            "stat": do_stat, "mkdir": do_mkdir, "move": do_move, "channels": do_channels}


def handle(req):
    rid = req.get("id")
    try:
        if req.get("type") == "exec":
            do_exec(req)
            return
        handler = HANDLERS.get(req.get("type"))
        if handler is None:
            raise Refused("protocol", "unknown request type %r" % req.get("type"))
        reply = handler(req)
        reply.update(type="ok", id=rid)
        send(reply)
    except Refused as e:
        send({"type": "error", "id": rid, "kind": e.kind, "message": str(e)})
    except Exception as e:  # keep the agent alive whatever one request does
        if out_of_pids(e):
            contain_exhaustion()
            # Answer once the pids are free, as an exec that ran does.
            settle_pids()
            send({"type": "error", "id": rid, "kind": "pids", "message": str(e)})
            return
        send({"type": "error", "id": rid, "kind": "io", "message": "%s: %s" % (type(e).__name__, e)})


def make_unreachable():
    """Commands run as the agent's user; a non-dumpable agent keeps them out
    of /proc/<agent>/fd (its protocol channel), mem and environ."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_DUMPABLE = 4
        if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl")
    except (OSError, AttributeError) as e:
        sys.stderr.write("dockhand agent: cannot make itself non-dumpable: %s\n" % e)


def reap_orphans():
    """As PID 1 the agent inherits every orphan; reap the dead ones so they
    do not use up the container's process limit (a fork bomb's remains).
    Meanwhile watch that limit: a command about to use it up is ended."""
    own = os.getpid()
    while True:
        time.sleep(0.1)
        try:
            reap_once(own)
        except Exception as e:  # the watch must outlive any one odd round
            sys.stderr.write("dockhand agent: reaping: %s\n" % e)


def reap_once(own):
    if near_pids_limit():
        contain_exhaustion()
    for pid, (state, ppid, _) in processes().items():
        # Children the agent runs itself are waited by their Popen.
        if state != "Z" or ppid != own:
            continue
        with _commands_lock:
            if pid in _commands:
                continue
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


# One past the highest request id seen: a host attaching later (a server
# restarted twice) numbers its requests from here, never reusing the id of
# a command an earlier host left running.
_next_id = 1


def serve(line):
    global _next_id
    try:
        req = json.loads(line)
    except ValueError:
        return
    rid = req.get("id")
    if isinstance(rid, int) and rid >= _next_id:
        _next_id = rid + 1
    if req.get("type") == "input":
        queue_input(req)
        return
    if req.get("type") == "signal":
        signal_group(req)
        return
    if req.get("type") == "resize":
        resize(req)
        return
    # A host that attached after the agent started (a pod on a cluster)
    # missed the first `ready`: say it again.
    if req.get("type") == "hello":
        send({"type": "ready", "pid": os.getpid(), "next_id": _next_id})
        return
    # Every pid in use (a command's fork bomb): end what used them up and
    # try again for a moment, since a bomb's remains take a while to go;
    # then refuse this request rather than end the agent.
    deadline = time.monotonic() + 2.0
    while True:
        try:
            threading.Thread(target=handle, args=(req,), daemon=True).start()
            return
        except RuntimeError as e:
            contain_exhaustion()
            if time.monotonic() >= deadline:
                send({"type": "error", "id": req.get("id"), "kind": "pids", "message": str(e)})
                return
            time.sleep(0.05)


def main():
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    # As PID 1 the agent gets only the signals it handles: Python's SIGINT
    # handler would let any command end it. A no-op handler (not SIG_IGN, which
    # commands would inherit) closes that.
    signal.signal(signal.SIGINT, lambda *_: None)
    make_unreachable()
    threading.Thread(target=reap_orphans, daemon=True).start()
    send({"type": "ready", "pid": os.getpid()})
    # A line's pieces are kept apart until its end arrives: joining them on
    # every read (and searching the whole for a newline) made a large
    # request cost the square of its size.
    pieces = []
    while True:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            break
        while True:
            end = chunk.find(b"\n")
            if end < 0:
                pieces.append(chunk)
                break
            pieces.append(chunk[:end])
            line = b"".join(pieces)
            pieces = []
            chunk = chunk[end + 1:]
            if line.strip():
                serve(line)


if __name__ == "__main__":
    main()
