"""dockhand kernel relay: carries Jupyter messages between the host and the
ipykernel processes of one kernel container, one process per context.

The session agent runs it with its stdin kept open; it speaks JSON lines:

  host -> relay  {"op": "start", "ctx", "cwd", "text_limit", "payload_limit", "startup": [lines], "formats": [...]}
                 {"op": "send", "ctx", "channel": "shell" | "control", "msg": {header, parent_header, metadata, content}}
                 {"op": "interrupt", "ctx"}
                 {"op": "stop", "ctx"}
                 {"op": "list"}
  relay -> host  {"ev": "ready"}
                 {"ev": "started", "ctx", "pid"} | {"ev": "failed", "ctx", "reason"}
                 {"ev": "msg", "ctx", "channel", "msg": {...}}
                 {"ev": "cut", "ctx", "parent", "stream"}       (later output of that stream was dropped)
                 {"ev": "died", "ctx", "code", "oom", "stderr"}
                 {"ev": "stopped", "ctx"}
                 {"ev": "contexts", "list": [{"ctx", "cwd"}]}   (the running contexts, for "list")

Messages are signed and checked with each kernel's own key (jupyter_client's
Session). The context a message belongs to is the socket it came from, never
anything the message says. The kernels talk over unix sockets in a private
directory, so this works with the network off.
"""

import ctypes
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time

import zmq
from jupyter_client.jsonutil import json_default
from jupyter_client.session import Session

RUN_DIR = "/tmp/.dockhand-kernels"
STARTUP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel_startup.py")
PORTS = {"shell": 1, "iopub": 2, "stdin": 3, "control": 4, "hb": 5}


def emit(event):
    data = (json.dumps(event, default=json_default, separators=(",", ":")) + "\n").encode()
    view = memoryview(data)
    while view:
        n = os.write(1, view)
        view = view[n:]


def prctl(option, value):
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def oom_kills():
    """The container's OOM-kill count (cgroup v2 or v1), or None."""
    for path, key in (("/sys/fs/cgroup/memory.events", "oom_kill"), ("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill")):
        try:
            with open(path) as f:
                for line in f:
                    name, _, value = line.partition(" ")
                    if name == key:
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def cap_text(text, limit):
    if len(text) <= limit:
        return text, False
    return text[:limit], True


def cap_bundle(data, limit):
    """Each MIME value of a bundle kept whole or cut (text) or dropped (binary)."""
    cut = []
    for mime in list(data):
        value = data[mime]
        size = len(value) if isinstance(value, str) else len(json.dumps(value, default=json_default))
        if size <= limit:
            continue
        cut.append(mime)
        if isinstance(value, str) and (mime.startswith("text/") or mime == "image/svg+xml"):
            data[mime] = value[:limit]
        else:
            del data[mime]
    return cut


class Context:
    def __init__(self, relay, req):
        self.name = req["ctx"]
        self.req = req
        self.text_limit = int(req.get("text_limit") or (1 << 20))
        self.payload_limit = int(req.get("payload_limit") or (8 << 20))
        self.dir = os.path.join(RUN_DIR, secrets.token_hex(8))
        os.makedirs(self.dir, mode=0o700)
        self.key = secrets.token_hex(32)
        conn = dict(transport="ipc", ip=os.path.join(self.dir, "k"), key=self.key,
                    signature_scheme="hmac-sha256", kernel_name="python3")
        conn.update({name + "_port": port for name, port in PORTS.items()})
        path = os.path.join(self.dir, "connection.json")
        with open(path, "w") as f:
            json.dump(conn, f)
        cwd = req.get("cwd") or os.getcwd()
        os.makedirs(cwd, exist_ok=True)
        formats = req.get("formats") or ["png"]
        lines = ["from matplotlib_inline.backend_inline import set_matplotlib_formats as _dh_f",
                 "try:\n    _dh_f(*%r)\nexcept Exception:\n    pass" % (formats,),
                 "del _dh_f"] if req.get("matplotlib", True) else []
        lines += list(req.get("startup") or [])
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", path,
                "--IPKernelApp.exec_files=%s" % json.dumps([STARTUP]),
                "--IPKernelApp.exec_lines=%s" % json.dumps(lines),
                "--HistoryManager.enabled=False", "--Application.log_level=ERROR"]
        env = dict(os.environ)
        env.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
        env["DOCKHAND_CONTEXT"] = self.name
        env["DOCKHAND_TEXT_LIMIT"] = str(self.text_limit)
        env["DOCKHAND_PAYLOAD_LIMIT"] = str(self.payload_limit)
        env.pop("JPY_PARENT_PID", None)
        self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.dir, "stderr"), "wb"),
                                     start_new_session=True)
        self.session = Session(key=self.key.encode(), signature_scheme="hmac-sha256", username="dockhand")
        ctx = relay.zmq
        base = conn["ip"]
        self.sockets = {}
        for name, kind in (("shell", zmq.DEALER), ("control", zmq.DEALER), ("iopub", zmq.SUB)):
            sock = ctx.socket(kind)
            sock.linger = 0
            if kind == zmq.SUB:
                sock.setsockopt(zmq.SUBSCRIBE, b"")
                # Past its high-water mark a SUB socket drops messages
                # silently; the kernel bounds what one run sends instead.
                sock.setsockopt(zmq.RCVHWM, 100000)
            sock.connect("ipc://%s-%d" % (base, PORTS[name]))
            self.sockets[name] = sock
        self.channel_of = {sock: name for name, sock in self.sockets.items()}
        self.ready = False
        self.nudge_id = None
        self.nudges = set()
        self.nudged_at = 0.0
        self.started_at = time.monotonic()
        self.streamed = {}
        self.current = None
        self.oom_before = oom_kills()

    def nudge(self):
        """Asks for kernel_info until iopub carries the answer's status: then
        the kernel is up and no output of the first run is lost."""
        now = time.monotonic()
        if now - self.nudged_at < 0.2:
            return
        self.nudged_at = now
        msg = self.session.msg("kernel_info_request", {})
        self.nudge_id = msg["header"]["msg_id"]
        self.nudges.add(self.nudge_id)
        self.session.send(self.sockets["shell"], msg)

    def send(self, channel, msg):
        if channel == "shell" and msg.get("header", {}).get("msg_type") == "execute_request":
            self.current = msg["header"].get("msg_id")
            self.streamed = {}
        self.session.send(self.sockets[channel], msg)

    def receive(self, sock):
        """Forwards every message waiting on `sock`."""
        while sock in self.channel_of and self.receive_one(sock):
            pass

    def receive_one(self, sock):
        channel = self.channel_of[sock]
        try:
            _, parts = self.session.feed_identities(sock.recv_multipart(zmq.NOBLOCK, copy=True), copy=True)
            msg = self.session.deserialize(parts, content=True)
        except zmq.Again:
            return False
        except Exception:
            return True  # unsigned or malformed: never forwarded
        parent = msg.get("parent_header") or {}
        if not self.ready:
            if channel == "iopub" and parent.get("msg_id") == self.nudge_id and msg["msg_type"] == "status":
                self.ready = True
                emit({"ev": "started", "ctx": self.name, "pid": self.proc.pid})
            return True
        if parent.get("msg_id") in self.nudges:
            return True
        content = msg.get("content") or {}
        kind = msg["msg_type"]
        if kind == "stream":
            stream = content.get("name", "stdout")
            used = self.streamed.get(stream, 0)
            if used >= self.text_limit:
                if used != self.text_limit + 1:
                    self.streamed[stream] = self.text_limit + 1
                    emit({"ev": "cut", "ctx": self.name, "parent": parent.get("msg_id"), "stream": stream})
                return True
            text, cut = cap_text(content.get("text", ""), self.text_limit - used)
            content["text"] = text
            self.streamed[stream] = used + len(text)
            if cut:
                self.streamed[stream] = self.text_limit + 1
                out = {k: msg.get(k) for k in ("header", "parent_header", "metadata", "content")}
                emit({"ev": "msg", "ctx": self.name, "channel": channel, "msg": out})
                emit({"ev": "cut", "ctx": self.name, "parent": parent.get("msg_id"), "stream": stream})
                return True
        elif kind in ("execute_result", "display_data", "update_display_data"):
            cut = cap_bundle(content.setdefault("data", {}), self.payload_limit)
            if cut:
                # On the bundle's own metadata, which is what the host reads.
                content.setdefault("metadata", {})["dockhand_cut"] = cut
        elif kind == "error":
            tb = content.get("traceback") or []
            content["traceback"] = [cap_text(line, self.text_limit)[0] for line in tb[:200]]
        out = {k: msg.get(k) for k in ("header", "parent_header", "metadata", "content")}
        emit({"ev": "msg", "ctx": self.name, "channel": channel, "msg": out})
        return True

    def stderr_tail(self):
        try:
            with open(os.path.join(self.dir, "stderr"), "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - 2000))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self):
        kill_session(self.proc.pid)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for sock in self.sockets.values():
            sock.close(0)
        shutil.rmtree(self.dir, ignore_errors=True)


def processes():
    """pid -> (ppid, sid) of every process we can see."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/stat" % entry) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                found[int(entry)] = (int(fields[1]), int(fields[3]))
            except (OSError, IndexError, ValueError):
                continue
    return found


def kill_session(sid):
    """Ends a kernel and everything it started that stayed in its session."""
    for pid, (_, s) in processes().items():
        if s == sid:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def end_stale_kernels():
    """Kernels of a relay that died (killed by code it ran) are ended with
    all they started: their state went with their relay."""
    for pid, (_, sid) in processes().items():
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"ipykernel_launcher" in argv and any(RUN_DIR.encode() in a for a in argv):
            kill_session(sid)
    shutil.rmtree(RUN_DIR, ignore_errors=True)


class Relay:
    def __init__(self):
        self.zmq = zmq.Context()
        self.contexts = {}
        self.poller = zmq.Poller()
        self.poller.register(0, zmq.POLLIN)
        self.buf = b""

    def start(self, req):
        name = req["ctx"]
        if name in self.contexts:
            self.stop(name, quiet=True)
        try:
            context = Context(self, req)
        except Exception as e:
            emit({"ev": "failed", "ctx": name, "reason": "%s: %s" % (type(e).__name__, e)})
            return
        self.contexts[name] = context
        for sock in context.sockets.values():
            self.poller.register(sock, zmq.POLLIN)

    def stop(self, name, quiet=False):
        context = self.contexts.pop(name, None)
        if context is not None:
            for sock in context.sockets.values():
                self.poller.unregister(sock)
            context.stop()
        self.reap_strays()
        if not quiet:
            emit({"ev": "stopped", "ctx": name})

    def reap_strays(self):
        """Orphans come to the relay (a subreaper); those whose kernel is
        gone are ended, and zombies are collected."""
        live = {c.proc.pid for c in self.contexts.values()}
        own = os.getpid()
        for pid, (ppid, sid) in processes().items():
            if ppid == own and pid not in live and sid not in live:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break

    def command(self, line):
        try:
            req = json.loads(line)
        except ValueError:
            return
        op, name = req.get("op"), req.get("ctx")
        if op == "start":
            self.start(req)
            return
        if op == "stop":
            self.stop(name)
            return
        if op == "list":
            # A host that took over this relay (its server restarted) asks
            # which contexts run, to route their events again.
            emit({"ev": "contexts", "list": [
                {"ctx": c.name, "cwd": c.req.get("cwd") or ""}
                for c in self.contexts.values() if c.ready]})
            return
        context = self.contexts.get(name)
        if context is None:
            emit({"ev": "failed", "ctx": name, "reason": "no such context"})
        elif op == "send":
            context.send(req.get("channel", "shell"), req["msg"])
        elif op == "interrupt":
            try:
                os.kill(context.proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass

    def read_commands(self):
        chunk = os.read(0, 1 << 20)
        if not chunk:
            return False
        self.buf += chunk
        while b"\n" in self.buf:
            line, _, self.buf = self.buf.partition(b"\n")
            if line.strip():
                self.command(line)
        return True

    def watch(self):
        for name, context in list(self.contexts.items()):
            code = context.proc.poll()
            if code is not None:
                oom = oom_kills()
                killed_by_oom = code == -signal.SIGKILL and oom is not None and oom != context.oom_before
                tail = context.stderr_tail()
                for sock in context.sockets.values():
                    self.poller.unregister(sock)
                context.stop()
                del self.contexts[name]
                emit({"ev": "died", "ctx": name, "code": code, "oom": killed_by_oom, "stderr": tail})
            elif not context.ready:
                if time.monotonic() - context.started_at > 60:
                    self.stop(name, quiet=True)
                    emit({"ev": "failed", "ctx": name, "reason": "the kernel did not answer within 60 s: " + context.stderr_tail()})
                else:
                    context.nudge()

    def run(self):
        emit({"ev": "ready"})
        last_reap = time.monotonic()
        while True:
            waiting = any(not c.ready for c in self.contexts.values())
            for sock, _ in self.poller.poll(50 if waiting else 200):
                if sock == 0:
                    if not self.read_commands():
                        return
                    continue
                for context in list(self.contexts.values()):
                    if sock in context.channel_of:
                        context.receive(sock)
                        break
            self.watch()
            if time.monotonic() - last_reap > 2:
                last_reap = time.monotonic()
                self.reap_strays()


def main():
    # The kernels run as this user too: a non-dumpable relay keeps their code
    # out of /proc/<relay>/fd (this channel), mem and environ.
    prctl(4, 0)  # PR_SET_DUMPABLE
    prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: orphans of kernels come here
    # A handler, not SIG_IGN, which the kernels would inherit and so never
    # see an interrupt.
    signal.signal(signal.SIGINT, lambda *_: None)
    end_stale_kernels()
    os.makedirs(RUN_DIR, mode=0o700, exist_ok=True)
    relay = Relay()
    try:
        relay.run()
    finally:
        for name in list(relay.contexts):
            relay.stop(name, quiet=True)


if __name__ == "__main__":
    main()
