"""dockhand kernel relay: carries Jupyter messages between the host and the
kernel processes of one kernel container, one process per context
(ipykernel, forked from a fork server; Deno, bash_kernel or IRkernel for
the other languages).

The session agent runs it with its stdin kept open; it speaks JSON lines:

  host -> relay  {"op": "start", "ctx", "language", "cwd", "text_limit", "payload_limit", "startup": [lines],
                  "modules": {name: module}, "formats": [...]}
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
                 {"ev": "contexts", "list": [{"ctx", "cwd", "language"}]}   (the running contexts, for "list")

Messages are signed and checked with each kernel's own key (jupyter_client's
Session). The context a message belongs to is the socket it came from, never
anything the message says. Python kernels talk over unix sockets in a
private directory, the others over loopback TCP, so this works with the
network off.
"""

import ast
import ctypes
import json
import os
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import time


RUN_DIR = "/tmp/.dockhand-kernels"
HERE = os.path.dirname(os.path.abspath(__file__))
STARTUP = os.path.join(HERE, "kernel_startup.py")
ZYGOTE = os.path.join(HERE, "kernel_zygote.py")
# Imported by the fork server before it forks any kernel.
# What ipykernel imports as it starts (its debugger without debugpy: see
# kernel_zygote.py).
KERNEL_MODULES = [
    "ipykernel.kernelapp", "ipykernel.ipkernel", "ipykernel.zmqshell", "ipykernel.debugger",
    "IPython.core.completerlib", "IPython.core.debugger", "IPython.extensions.storemagic",
    "faulthandler", "pdb", "tornado.platform.asyncio", "concurrent.futures.thread",
]
MATPLOTLIB_MODULES = ["matplotlib_inline.backend_inline"]
PORTS = {"shell": 1, "iopub": 2, "stdin": 3, "control": 4, "hb": 5}


def emit(event):
    data = (json.dumps(event, default=json_default, separators=(",", ":")) + "\n").encode()
    view = memoryview(data)
    while view:
        n = os.write(1, view)
        view = view[n:]


# pyzmq and jupyter_client, imported by `load_messaging` once the fork
# server is on its way (the two import side by side).
zmq = None
Session = None
json_default = None


def load_messaging():
    global zmq, Session, json_default
    import zmq as zmq_module
    from jupyter_client.jsonutil import json_default as default
    from jupyter_client.session import Session as session_class

    zmq, Session, json_default = zmq_module, session_class, default


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


def matplotlib_lines(formats):
    """Figures shown in these formats. The inline backend sets up its hooks
    only when it is imported into a running IPython: in a kernel forked
    after the fork server imported it, they are set up here."""
    return [
        "from matplotlib_inline import backend_inline as _dh_bi",
        "if _dh_bi.flush_figures not in get_ipython().events.callbacks.get('post_execute', []):\n"
        "    _dh_bi._enable_matplotlib_integration()",
        "try:\n    _dh_bi.set_matplotlib_formats(*%r)\nexcept Exception:\n    pass" % (list(formats),),
        "del _dh_bi",
    ]


# Binds names to modules imported the first time the code uses them
# (`modules`: {name: module}): a module object standing in for the real one
# until an attribute is asked of it, then replaced by it wherever the
# context's namespace held it. Each first use is noted in the context's
# `first-use` file, so the fork server can import the module for the
# contexts forked after it.
DEFERRED_MODULES = """\
def _dh_defer(modules, noted):
    import importlib, os, types
    ns = get_ipython().user_ns

    class DeferredModule(types.ModuleType):
        def __getattr__(self, attr):
            return getattr(load(self), attr)

        def __dir__(self):
            return dir(load(self))

        def __repr__(self):
            return "<module %%r (imported when first used)>" %% self.__name__

    def load(stand_in):
        real = importlib.import_module(stand_in.__name__)
        for name, value in list(ns.items()):
            if value is stand_in:
                ns[name] = real
        try:
            fd = os.open(noted, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_NOFOLLOW, 0o600)
            try:
                os.write(fd, (stand_in.__name__ + "\\n").encode())
            finally:
                os.close(fd)
        except OSError:
            pass
        return real

    for name, module in modules.items():
        ns.setdefault(name, DeferredModule(module))
_dh_defer(%r, %r)
del _dh_defer"""
FIRST_USE_LIMIT = 4096


def checked_modules(modules):
    """{name: module} with only Python identifiers (dotted for a module)."""
    return {str(k): str(v) for k, v in (modules or {}).items()
            if str(k).isidentifier() and all(p.isidentifier() for p in str(v).split("."))}


def deferred_lines(modules, noted):
    """The startup line binding `modules` ({name: module}), or none."""
    return [DEFERRED_MODULES % (modules, noted)] if modules else []


def first_uses(path):
    """The modules a context's kernel noted as used (its code can write
    anything there: read as a regular file only, at most a few KiB)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return set()
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return set()
        data = os.read(fd, FIRST_USE_LIMIT)
    except OSError:
        return set()
    finally:
        os.close(fd)
    return set(data.decode("utf-8", "replace").split())


def imports_matplotlib(modules):
    return any(m == "matplotlib" or m.startswith("matplotlib.") for m in modules)


def startup_imports(lines):
    """The modules a context's startup code imports (at its top level), for
    the fork server to import once."""
    found = []
    for line in lines:
        try:
            tree = ast.parse(line)
        except (SyntaxError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, ast.Import):
                found += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.append(node.module)
    return found


class Forked:
    """A kernel the fork server made, re-parented to this relay: waited for
    as a child of its own (the `Popen` calls the relay uses)."""

    def __init__(self, pid):
        self.pid = pid
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout):
        end = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > end:
                raise subprocess.TimeoutExpired("kernel", timeout)
            time.sleep(0.01)
        return self.returncode


class Zygote:
    """The fork server (kernel_zygote.py), started at the first context with
    the modules its startup imports."""

    def __init__(self, startup):
        # The inline backend (and so matplotlib) only where the startup
        # imports matplotlib: elsewhere IPython loads it when the code does.
        imported = startup_imports(startup)
        modules = KERNEL_MODULES + (MATPLOTLIB_MODULES if imports_matplotlib(imported) else []) + imported
        self.proc = subprocess.Popen(
            [sys.executable, "-B", ZYGOTE, RUN_DIR] + modules, env=kernel_env(),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            start_new_session=True)
        self.out = self.proc.stdout.fileno()
        self.buf = b""
        # Contexts waiting for their kernel, in the order asked.
        self.waiting = []
        # Modules it was asked to import after it started.
        self.imported = set()

    def alive(self):
        return self.proc.poll() is None

    def ask(self, context):
        try:
            request = dict(context.launch, argv=context.fork_args)
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            return False
        self.waiting.append(context)
        return True

    def share(self, modules):
        """Has the fork server import `modules` (not answered), so kernels
        forked after it start with them imported."""
        modules = sorted(set(modules) - self.imported)
        if not modules:
            return
        try:
            self.proc.stdin.write((json.dumps({"import": modules}) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            return
        self.imported.update(modules)

    def answers(self):
        """(context, pid or None) for each answer waiting on its pipe, and
        whether the pipe ended (the fork server is gone)."""
        try:
            chunk = os.read(self.out, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            return [], True
        self.buf += chunk
        done = []
        while b"\n" in self.buf and self.waiting:
            line, _, self.buf = self.buf.partition(b"\n")
            try:
                pid = int(json.loads(line).get("pid"))
            except (ValueError, TypeError, AttributeError):
                pid = None
            done.append((self.waiting.pop(0), pid))
        return done, False

    def stop(self):
        kill_session(self.proc.pid)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def free_ports():
    """Five loopback ports free a moment ago, for a TCP kernel to bind."""
    import socket

    held, ports = [], {}
    try:
        for name in PORTS:
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            held.append(sock)
            ports[name] = sock.getsockname()[1]
    finally:
        for sock in held:
            sock.close()
    return ports


def other_kernel(language, connection, run_dir, env):
    """The command line of a language's kernel (other than Python's)."""
    if language in ("javascript", "typescript"):
        deno = shutil.which("deno", path=env.get("PATH"))
        if deno is None:
            raise RuntimeError("no `deno` in the image (KernelConfig::languages adds it)")
        # Deno keeps its module cache where it can write; its update check
        # would reach for the network.
        env.setdefault("DENO_DIR", os.path.join(run_dir, "deno"))
        env["DENO_NO_UPDATE_CHECK"] = "1"
        env["NO_COLOR"] = "1"
        return [deno, "jupyter", "--kernel", "--conn", connection]
    if language == "bash":
        return [sys.executable, "-m", "bash_kernel", "-f", connection]
    if language == "r":
        r = shutil.which("R", path=env.get("PATH"))
        if r is None:
            raise RuntimeError("no `R` in the image (KernelConfig::languages adds it)")
        return [r, "--slave", "--no-save", "--no-restore", "-e", "IRkernel::main()", "--args", connection]
    raise RuntimeError("no kernel for language %r" % language)


def early_zygote():
    """The fork server, started before the relay imports its own modules
    when the host said what the contexts' startup imports (the
    DOCKHAND_KERNEL_STARTUP variable: a JSON list of code)."""
    text = os.environ.pop("DOCKHAND_KERNEL_STARTUP", None)
    if text is None:
        return None
    try:
        startup = [line for line in json.loads(text) if isinstance(line, str)]
    except (ValueError, TypeError):
        startup = []
    try:
        return Zygote(startup)
    except OSError:
        return None


def kernel_env():
    env = dict(os.environ)
    env.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    env.pop("JPY_PARENT_PID", None)
    return env


class Context:
    def __init__(self, relay, req):
        self.name = req["ctx"]
        self.req = req
        self.text_limit = int(req.get("text_limit") or (1 << 20))
        self.payload_limit = int(req.get("payload_limit") or (8 << 20))
        self.dir = os.path.join(RUN_DIR, secrets.token_hex(8))
        os.makedirs(self.dir, mode=0o700)
        self.key = secrets.token_hex(32)
        self.language = req.get("language") or "python"
        # The modules bound in it, and where its kernel notes their first use.
        self.bound = set()
        self.first_use = None
        if self.language == "python":
            conn = dict(transport="ipc", ip=os.path.join(self.dir, "k"))
            ports = PORTS
        else:
            # The other kernels build their addresses as transport://ip:port,
            # which ipc paths do not fit: loopback TCP, present with the
            # network off, and every message still signed with the key.
            conn = dict(transport="tcp", ip="127.0.0.1")
            ports = free_ports()
        conn.update(key=self.key, signature_scheme="hmac-sha256", kernel_name=self.language)
        conn.update({name + "_port": port for name, port in ports.items()})
        path = os.path.join(self.dir, "connection.json")
        with open(path, "w") as f:
            json.dump(conn, f)
        cwd = req.get("cwd") or os.getcwd()
        os.makedirs(cwd, exist_ok=True)
        env = kernel_env()
        env["DOCKHAND_CONTEXT"] = self.name
        env["DOCKHAND_TEXT_LIMIT"] = str(self.text_limit)
        env["DOCKHAND_PAYLOAD_LIMIT"] = str(self.payload_limit)
        stderr = os.path.join(self.dir, "stderr")
        self.proc = None
        self.ready = False
        self.announced = False
        if self.language == "python":
            formats = req.get("formats") or ["png"]
            startup = list(req.get("startup") or [])
            # Names bound first, so the startup's own code can use them.
            modules = checked_modules(req.get("modules"))
            self.bound = set(modules.values())
            self.first_use = os.path.join(self.dir, "first-use")
            lines = deferred_lines(modules, self.first_use)
            if imports_matplotlib(startup_imports(startup)):
                lines += matplotlib_lines(formats)
            lines += startup
            args = ["-f", path,
                    # Read by the inline backend when matplotlib is imported.
                    "--InlineBackend.figure_formats=%s" % json.dumps(list(formats)),
                    "--IPKernelApp.exec_files=%s" % json.dumps([STARTUP]),
                    "--IPKernelApp.exec_lines=%s" % json.dumps(lines),
                    "--HistoryManager.enabled=False", "--Application.log_level=ERROR",
                    # A pause before each reply, for clients that take the
                    # reply for the end; the host waits for idle too.
                    "--IPythonKernel._execute_sleep=0"]
            self.launch = {"argv": [sys.executable, "-m", "ipykernel_launcher"] + args,
                           "cwd": cwd, "env": env, "stderr": stderr}
            # ipykernel's own arguments, for the fork server.
            self.fork_args = args
            # Started by the fork server when it answers (`forked`), or here.
            if not relay.fork(self):
                self.start_here()
        else:
            self.launch = {"argv": other_kernel(self.language, path, self.dir, env),
                           "cwd": cwd, "env": env, "stderr": stderr}
            self.start_here()
        self.session = Session(key=self.key.encode(), signature_scheme="hmac-sha256", username="dockhand")
        ctx = relay.zmq
        address = {name: ("ipc://%s-%d" if conn["transport"] == "ipc" else "tcp://%s:%d") % (conn["ip"], port)
                   for name, port in ports.items()}
        self.sockets = {}
        for name, kind in (("shell", zmq.DEALER), ("control", zmq.DEALER), ("iopub", zmq.SUB)):
            sock = ctx.socket(kind)
            sock.linger = 0
            # The kernel binds after this connects: retry soon, not in
            # zmq's default 100 ms.
            sock.setsockopt(zmq.RECONNECT_IVL, 10)
            if kind == zmq.SUB:
                sock.setsockopt(zmq.SUBSCRIBE, b"")
                # Past its high-water mark a SUB socket drops messages
                # silently; the kernel bounds what one run sends instead.
                sock.setsockopt(zmq.RCVHWM, 100000)
            sock.connect(address[name])
            self.sockets[name] = sock
        self.channel_of = {sock: name for name, sock in self.sockets.items()}
        self.nudge_id = None
        self.nudges = set()
        self.nudged_at = 0.0
        self.started_at = time.monotonic()
        self.streamed = {}
        self.current = None
        self.oom_before = oom_kills()

    def start_here(self):
        """Starts the kernel as its own process (no fork server); what a
        forked kernel it replaces answered does not count."""
        self.ready = False
        launch = self.launch
        self.proc = subprocess.Popen(
            launch["argv"], cwd=launch["cwd"],
            env=launch["env"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(launch["stderr"], "wb"), start_new_session=True)

    def announce(self):
        """Says the kernel started, once, when it has answered and its pid
        is known: a forked kernel may answer before the fork server's reply
        naming it is read."""
        if self.ready and self.proc is not None and not self.announced:
            self.announced = True
            emit({"ev": "started", "ctx": self.name, "pid": self.proc.pid})

    def forked(self, pid):
        """Takes the fork server's kernel for this context if it is this
        relay's child leading its own session; False if not (a runtime
        without subreapers, gVisor's, leaves it to the container's init)."""
        info = processes().get(pid)
        if info is None or info[0] != os.getpid() or info[1] != pid:
            return False
        self.proc = Forked(pid)
        self.announce()
        return True

    def interrupt(self):
        """SIGINT, which ipykernel, bash_kernel and IRkernel take as an
        interrupt; Deno ends on it, so it gets Jupyter's interrupt_request."""
        if self.language in ("javascript", "typescript"):
            self.session.send(self.sockets["control"], self.session.msg("interrupt_request", {}))
            return
        try:
            os.kill(self.proc.pid, signal.SIGINT)
        except ProcessLookupError:
            pass

    def nudge(self):
        """Asks for kernel_info until iopub carries the answer's status: then
        the kernel is up and no output of the first run is lost."""
        now = time.monotonic()
        if now - self.nudged_at < 0.05:
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
                self.announce()
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
            if self.language == "bash" and not content.get("ename"):
                # bash_kernel names no error: its value is the exit status.
                content["ename"] = "ExitStatus"
                content["evalue"] = "the command exited with status %s" % content.get("evalue", "")
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
        if self.proc is not None:
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


def forked_kernel(pid):
    """Whether `pid` is a kernel a fork server made (by its name)."""
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip() == "dockhand-kernel"
    except OSError:
        return False


def end_stale_kernels():
    """Kernels of a relay that died (killed by code it ran) are ended with
    all they started: their state went with their relay."""
    for pid, (_, sid) in processes().items():
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        # A fork server's kernels carry its command line.
        if (b"ipykernel_launcher" in argv or any(a.endswith(b"kernel_zygote.py") for a in argv)) \
                and any(RUN_DIR.encode() in a for a in argv):
            kill_session(sid)
    shutil.rmtree(RUN_DIR, ignore_errors=True)


class Relay:
    def __init__(self, zygote):
        self.zmq = zmq.Context()
        self.contexts = {}
        self.poller = zmq.Poller()
        self.poller.register(0, zmq.POLLIN)
        self.buf = b""
        self.zygote = zygote
        if zygote is not None:
            self.poller.register(zygote.out, zmq.POLLIN)
        # Set when the fork server cannot be used: kernels start on their own.
        self.no_zygote = False

    def fork(self, context):
        """Asks the fork server for `context`'s kernel (started at the first
        context, with the modules its startup imports); False where there
        is none to ask."""
        if self.no_zygote:
            return False
        if self.zygote is not None and not self.zygote.alive():
            self.drop_zygote()
        if self.zygote is None:
            try:
                self.zygote = Zygote(context.req.get("startup") or [])
            except OSError:
                self.no_zygote = True
                return False
            self.poller.register(self.zygote.out, zmq.POLLIN)
        return self.zygote.ask(context)

    def drop_zygote(self):
        """Ends the fork server; the contexts it had not answered start
        their kernels here."""
        zygote, self.zygote = self.zygote, None
        self.poller.unregister(zygote.out)
        zygote.stop()
        # Kernels it forked that no context took (answers it never gave, or
        # that went to the container's init) end with it.
        live = {c.proc.pid for c in self.contexts.values() if c.proc is not None}
        for pid, (_, sid) in processes().items():
            if pid == sid and pid not in live and forked_kernel(pid):
                kill_session(pid)
        for context in zygote.waiting:
            if self.contexts.get(context.name) is context and context.proc is None:
                context.start_here()

    def zygote_answered(self):
        done, ended = self.zygote.answers()
        for context, pid in done:
            if self.contexts.get(context.name) is not context:
                if pid is not None and forked_kernel(pid):
                    # Its context was stopped while its kernel was made.
                    kill_session(pid)
            elif pid is None:
                context.start_here()
            elif not context.forked(pid):
                # Not a kernel this relay can wait for: it is ended (only
                # if it is one: the fork server runs the user's modules),
                # and this relay's kernels are started by itself from now.
                if forked_kernel(pid):
                    kill_session(pid)
                self.no_zygote = True
                ended = True
                context.start_here()
        if ended:
            self.drop_zygote()

    def share_first_uses(self):
        """Bound modules some context's code has used are imported by the
        fork server, once: the contexts forked after that start with them."""
        if self.zygote is None or not self.zygote.alive():
            return
        used = set()
        for context in self.contexts.values():
            # A context whose modules are all imported there has nothing to add.
            unshared = context.bound - self.zygote.imported
            if unshared:
                used |= first_uses(context.first_use) & unshared
        self.zygote.share(used)

    def start(self, req):
        name = req["ctx"]
        self.share_first_uses()
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
        if self.zygote is not None and self.zygote.waiting:
            # A kernel the fork server just made is this relay's child
            # before the relay hears its pid.
            return
        live = {c.proc.pid for c in self.contexts.values() if c.proc is not None}
        if self.zygote is not None:
            live.add(self.zygote.proc.pid)
        own = os.getpid()
        for pid, (ppid, sid) in processes().items():
            if ppid == own and pid not in live and sid not in live:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        # Strays only: a kernel's own status is its context's to collect.
        for pid, (ppid, _) in processes().items():
            if ppid == own and pid not in live:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass

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
                {"ctx": c.name, "cwd": c.req.get("cwd") or "", "language": c.language}
                for c in self.contexts.values() if c.announced]})
            return
        context = self.contexts.get(name)
        if context is None:
            emit({"ev": "failed", "ctx": name, "reason": "no such context"})
        elif op == "send":
            context.send(req.get("channel", "shell"), req["msg"])
        elif op == "interrupt" and context.proc is not None:
            context.interrupt()

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
            code = None if context.proc is None else context.proc.poll()
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
            for sock, _ in self.poller.poll(10 if waiting else 200):
                if sock == 0:
                    if not self.read_commands():
                        return
                    continue
                if self.zygote is not None and sock == self.zygote.out:
                    self.zygote_answered()
                    continue
                for context in list(self.contexts.values()):
                    if sock in context.channel_of:
                        context.receive(sock)
                        break
            self.watch()
            if time.monotonic() - last_reap > 2:
                last_reap = time.monotonic()
                self.reap_strays()
                self.share_first_uses()


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
    zygote = early_zygote()
    load_messaging()
    relay = Relay(zygote)
    try:
        relay.run()
    finally:
        for name in list(relay.contexts):
            relay.stop(name, quiet=True)
        if relay.zygote is not None:
            relay.zygote.stop()


if __name__ == "__main__":
    main()
