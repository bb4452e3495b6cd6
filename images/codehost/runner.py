"""dockhand code host runner: executes restricted Python for the host.

Runs as the main process of a long-lived container and speaks JSON lines on
stdin/stdout with the host (see sdk/src/codemode/protocol.rs):

  host -> runner  {"type": "execute", "id", "code", "inputs", "tools", "limits", "session"}
                  {"type": "tool_result", "call", "ok", "value" | "error"}
                  {"type": "close_session", "session"}
  runner -> host  {"type": "ready"}
                  {"type": "tool_call", "call", "name", "args", "kwargs"}
                  {"type": "result", "id", "ok", "value" | "error", "stdout", "stdout_truncated"}

Each execution runs in a fresh process forked ahead of time (a warm child), so
nothing leaks between executions and starting one costs no interpreter start.
Sessions are long-lived children whose namespace persists.

The code is checked before it runs (imports, dunder names, dangerous builtins,
huge literals), rewritten so every loop stops after a set number of
iterations, and runs with a memory limit; the parent enforces the time limit.
"""

import ast
import base64
import collections
import datetime
import json
import marshal
import math
import os
import re
import resource
import select
import signal
import sys
import traceback

BLOCKED_BUILTINS = {
    "eval", "exec", "compile", "open", "input", "getattr", "setattr", "delattr",
    "globals", "locals", "vars", "breakpoint", "__import__", "help", "exit", "quit",
    "memoryview", "type", "copyright", "credits", "license",
}
# Attributes that reach frames, code objects or globals without dunders.
BLOCKED_ATTRIBUTES = {
    "gi_frame", "gi_code", "cr_frame", "cr_code", "ag_frame", "ag_code", "f_globals",
    "f_locals", "f_builtins", "f_back", "f_code", "tb_frame", "tb_next", "co_code",
    "func_globals", "format_map", "mro",
}
MAX_LITERAL = 10_000
RESERVED_PREFIX = "_dh"
PRELOADED = ("json", "math", "re", "datetime", "Counter", "defaultdict", "OrderedDict")


class Rejected(Exception):
    """The code broke a rule; carries the rule, line and column."""

    def __init__(self, rule, message, node):
        super().__init__(message)
        self.rule = rule
        self.line = getattr(node, "lineno", 0)
        self.col = getattr(node, "col_offset", 0) + 1


def is_dunder(name):
    return name.startswith("__")


def validate(tree):
    """Raises Rejected for the first construct the sandbox does not allow."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            raise Rejected("import", "imports are not allowed; json, math, re, datetime, Counter, defaultdict and OrderedDict are preloaded", node)
        if isinstance(node, ast.Name):
            if is_dunder(node.id):
                raise Rejected("dunder", "name %r is not allowed (dunder names are blocked)" % node.id, node)
            if node.id in BLOCKED_BUILTINS:
                raise Rejected("builtin", "%r is not available in the sandbox" % node.id, node)
            if node.id.startswith(RESERVED_PREFIX):
                raise Rejected("reserved", "names starting with %r are reserved" % RESERVED_PREFIX, node)
        elif isinstance(node, ast.Attribute):
            if is_dunder(node.attr):
                raise Rejected("dunder", "attribute %r is not allowed (dunder attributes are blocked)" % node.attr, node)
            if node.attr in BLOCKED_ATTRIBUTES:
                raise Rejected("attribute", "attribute %r is not allowed" % node.attr, node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if is_dunder(node.name) or node.name.startswith(RESERVED_PREFIX):
                raise Rejected("dunder", "definition name %r is not allowed" % node.name, node)
        elif isinstance(node, ast.arg):
            if is_dunder(node.arg) or node.arg.startswith(RESERVED_PREFIX):
                raise Rejected("dunder", "argument name %r is not allowed" % node.arg, node)
        elif isinstance(node, ast.keyword) and node.arg and is_dunder(node.arg):
            raise Rejected("dunder", "keyword %r is not allowed" % node.arg, node)
        elif isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
            if len(node.value) > MAX_LITERAL:
                raise Rejected("literal_size", "string literal of %d characters is over the %d limit" % (len(node.value), MAX_LITERAL), node)
            if isinstance(node.value, str) and re.search(r"\{[^}]*__", node.value):
                raise Rejected("dunder", "format fields may not name dunder attributes", node)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                if is_dunder(name) or name.startswith(RESERVED_PREFIX):
                    raise Rejected("reserved", "name %r is not allowed" % name, node)


class Rewriter(ast.NodeTransformer):
    """Loop guards, await-as-call, tool calls started concurrently inside gather()."""

    def __init__(self, tools):
        self.tools = tools
        self.loops = 0
        self.in_gather = 0

    def _loop_id(self):
        self.loops += 1
        return self.loops

    def _tick(self, loop_id, node):
        call = ast.Expr(ast.Call(ast.Name("_dh_tick", ast.Load()), [ast.Constant(loop_id)], []))
        return ast.copy_location(call, node)

    def visit_While(self, node):
        self.generic_visit(node)
        loop_id = self._loop_id()
        node.body.insert(0, self._tick(loop_id, node))
        enter = ast.copy_location(ast.Expr(ast.Call(ast.Name("_dh_enter", ast.Load()), [ast.Constant(loop_id)], [])), node)
        return [enter, node]

    def _guard_iter(self, node):
        loop_id = self._loop_id()
        node.iter = ast.copy_location(ast.Call(ast.Name("_dh_iter", ast.Load()), [ast.Constant(loop_id), node.iter], []), node.iter)

    def visit_For(self, node):
        self.generic_visit(node)
        self._guard_iter(node)
        return node

    visit_AsyncFor = visit_For

    def visit_comprehension(self, node):
        self.generic_visit(node)
        self._guard_iter(node)
        return node

    def visit_Await(self, node):
        self.generic_visit(node)
        return ast.copy_location(ast.Call(ast.Name("_dh_await", ast.Load()), [node.value], []), node)

    def visit_Call(self, node):
        func = node.func
        is_gather = (isinstance(func, ast.Name) and func.id == "gather") or (
            isinstance(func, ast.Attribute) and func.attr == "gather"
            and isinstance(func.value, ast.Name) and func.value.id == "asyncio"
        )
        if is_gather:
            self.in_gather += 1
            self.generic_visit(node)
            self.in_gather -= 1
            return node
        self.generic_visit(node)
        if self.in_gather and isinstance(func, ast.Name) and func.id in self.tools:
            node.func = ast.copy_location(ast.Name("_dh_start_" + func.id, ast.Load()), func)
        return node


def prepare(code, tools):
    """Parses, validates and rewrites code; the value of a final expression is kept."""
    try:
        tree = ast.parse(code, "<code>", "exec")
    except SyntaxError as e:
        raise Rejected("syntax", "%s" % e.msg, type("P", (), {"lineno": e.lineno or 0, "col_offset": (e.offset or 1) - 1})())
    validate(tree)
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = tree.body[-1]
        tree.body[-1] = ast.copy_location(ast.Assign([ast.Name("_dh_result", ast.Store())], last.value), last)
    tree = Rewriter(set(tools)).visit(tree)
    ast.fix_missing_locations(tree)
    return compile(tree, "<code>", "exec")


# ---------------------------------------------------------------- channel

class Channel:
    """JSON lines over two file descriptors, with a private read buffer."""

    def __init__(self, rfd, wfd):
        self.rfd, self.wfd = rfd, wfd
        self.buf = b""

    def send(self, msg):
        data = (json.dumps(msg, separators=(",", ":")) + "\n").encode()
        while data:
            n = os.write(self.wfd, data)
            data = data[n:]

    def recv(self):
        while b"\n" not in self.buf:
            chunk = os.read(self.rfd, 1 << 16)
            if not chunk:
                return None
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)


# ---------------------------------------------------------------- execution (child side)

class LoopLimit(Exception):
    pass


class ToolError(Exception):
    """Raised in the code when a tool fails; the message is the tool's."""


class OutputLimit(Exception):
    pass


class CappedWriter:
    def __init__(self, limit):
        self.limit, self.parts, self.size, self.truncated = limit, [], 0, False

    def write(self, text):
        text = str(text)
        room = self.limit - self.size
        if len(text) > room:
            self.truncated = True
            text = text[:max(room, 0)]
        if text:
            self.parts.append(text)
            self.size += len(text)
        return len(text)

    def flush(self):
        pass

    def value(self):
        return "".join(self.parts)


class Pending:
    def __init__(self, bridge, call):
        self.bridge, self.call = bridge, call

    def result(self):
        return self.bridge.wait(self.call)


class Bridge:
    """Tool calls from the code to the host over stdin/stdout."""

    def __init__(self, channel):
        self.channel = channel
        self.next_call = 0
        self.done = {}

    def start(self, name, args, kwargs):
        args = [a.result() if isinstance(a, Pending) else a for a in args]
        kwargs = {k: (v.result() if isinstance(v, Pending) else v) for k, v in kwargs.items()}
        self.next_call += 1
        call = self.next_call
        self.channel.send({"type": "tool_call", "call": call, "name": name, "args": args, "kwargs": kwargs})
        return Pending(self, call)

    def wait(self, call):
        while call not in self.done:
            msg = self.channel.recv()
            if msg is None:
                raise SystemExit(70)
            if msg.get("type") == "tool_result":
                self.done[msg["call"]] = msg
        msg = self.done.pop(call)
        if msg.get("ok"):
            return msg.get("value")
        raise ToolError(msg.get("error", "tool failed"))


def base_namespace():
    import builtins
    allowed = {k: v for k, v in vars(builtins).items() if k not in BLOCKED_BUILTINS and not k.startswith("_")}
    allowed["__build_class__"] = builtins.__build_class__  # class statements need it
    allowed["__name__"] = "sandbox"
    ns = {"__builtins__": allowed, "__name__": "__main__"}
    ns.update(json=json, math=math, re=re, datetime=datetime,
              Counter=collections.Counter, defaultdict=collections.defaultdict,
              OrderedDict=collections.OrderedDict, ToolError=ToolError)
    return ns


def install_runtime(ns, bridge, tools, loop_limit, out):
    counters = {}

    def tick(loop_id):
        n = counters.get(loop_id, 0) + 1
        counters[loop_id] = n
        if n > loop_limit:
            raise LoopLimit("a loop ran more than %d iterations" % loop_limit)

    def enter(loop_id):
        counters[loop_id] = 0

    def guarded(loop_id, iterable):
        n = 0
        for item in iterable:
            n += 1
            if n > loop_limit:
                raise LoopLimit("a loop ran more than %d iterations" % loop_limit)
            yield item

    def await_(value):
        if isinstance(value, Pending):
            return value.result()
        if hasattr(value, "send") and hasattr(value, "throw") and hasattr(value, "close"):
            try:
                while True:
                    value.send(None)
            except StopIteration as stop:
                return stop.value
        return value

    def gather(*items):
        flat = []
        for item in items:
            if isinstance(item, (list, tuple)):
                flat.extend(item)
            else:
                flat.append(item)
        return [await_(item) for item in flat]

    def printer(*args, sep=" ", end="\n", file=None, flush=False):
        out.write(sep.join(str(a) for a in args) + end)

    class AsyncioShim:
        pass

    shim = AsyncioShim()
    shim.gather = gather
    ns.update(_dh_tick=tick, _dh_enter=enter, _dh_iter=guarded, _dh_await=await_,
              gather=gather, asyncio=shim)
    ns["__builtins__"]["print"] = printer
    for name in tools:
        def call(*args, _name=name, **kwargs):
            return bridge.start(_name, args, kwargs).result()

        def start(*args, _name=name, **kwargs):
            return bridge.start(_name, args, kwargs)

        call.__name__ = name
        ns[name] = call
        ns["_dh_start_" + name] = start


def to_json(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    return repr(value)


def user_line(tb):
    """The line in the user's code where an exception was raised."""
    line = 0
    for frame, lineno in traceback.walk_tb(tb):
        if frame.f_code.co_filename == "<code>":
            line = lineno
    return line


def rejection(request, e):
    """The result for code that broke a rule."""
    return {"type": "result", "id": request["id"], "ok": False, "stdout": "", "stdout_truncated": False,
            "error": {"kind": "validation", "rule": e.rule, "message": str(e), "line": e.line, "col": e.col}}


def execute(request, ns, channel):
    """Runs one request in this process; returns the result message."""
    limits = request.get("limits", {})
    out = CappedWriter(int(limits.get("print_limit", 16384)))
    tools = request.get("tools", [])
    result = {"type": "result", "id": request["id"]}
    # Checked and compiled by the parent, which is warm: unmarshalling touches
    # far less memory in this fresh fork than compiling would.
    code = marshal.loads(base64.b64decode(request["compiled"]))
    bridge = Bridge(channel)
    install_runtime(ns, bridge, tools, int(limits.get("loop_limit", 10000)), out)
    ns.update(request.get("inputs") or {})
    sys.stdout = sys.stderr = out
    try:
        ns.pop("_dh_result", None)
        exec(code, ns)
        value = to_json(ns.pop("_dh_result", None))
        encoded = json.dumps(value)
        value_limit = int(limits.get("value_limit", 1 << 20))
        if len(encoded) > value_limit:
            raise OutputLimit("the final value is %d bytes of JSON, over the %d limit" % (len(encoded), value_limit))
        result.update(ok=True, value=value)
    except LoopLimit as e:
        result.update(ok=False, error={"kind": "loop_limit", "message": str(e), "line": user_line(e.__traceback__)})
    except MemoryError:
        result.update(ok=False, error={"kind": "memory", "message": "the code used more memory than its limit"})
    except OutputLimit as e:
        result.update(ok=False, error={"kind": "output_limit", "message": str(e)})
    except ToolError as e:
        result.update(ok=False, error={"kind": "tool", "type": "ToolError", "message": str(e), "line": user_line(e.__traceback__)})
    except RecursionError as e:
        result.update(ok=False, error={"kind": "runtime", "type": "RecursionError", "message": str(e), "line": user_line(e.__traceback__)})
    except BaseException as e:  # the user's own exceptions, SystemExit included
        result.update(ok=False, error={"kind": "runtime", "type": type(e).__name__, "message": str(e), "line": user_line(e.__traceback__)})
    finally:
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
    result.update(stdout=out.value(), stdout_truncated=out.truncated)
    return result


def child_loop(request_fd, result_fd, stdio, persistent):
    """A child: waits for requests on its pipe, runs them, reports on its result pipe."""
    ns = base_namespace()
    requests = Channel(request_fd, -1)
    results = Channel(-1, result_fd)
    memory_set = False
    while True:
        request = requests.recv()
        if request is None:
            os._exit(0)
        if not memory_set:
            limit = int(request.get("limits", {}).get("memory_bytes", 0))
            if limit:
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            memory_set = True
        result = execute(request, ns, stdio)
        try:
            results.send(result)
        except MemoryError:
            os._exit(71)
        if not persistent:
            os._exit(0)


# ---------------------------------------------------------------- parent

class Child:
    def __init__(self, persistent):
        req_r, req_w = os.pipe()
        res_r, res_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(req_w)
            os.close(res_r)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            try:
                child_loop(req_r, res_w, Channel(0, 1), persistent)
            finally:
                os._exit(0)
        os.close(req_r)
        os.close(res_w)
        self.pid = pid
        self.requests = Channel(-1, req_w)
        self.results = Channel(res_r, -1)

    def reap(self):
        """Waits for the process to end and closes its pipes."""
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        os.close(self.requests.wfd)
        os.close(self.results.rfd)

    def kill(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.reap()

    def run(self, request):
        """Sends a request and waits for its result within the time limit."""
        timeout = float(request.get("limits", {}).get("timeout_s", 30))
        self.requests.send(request)
        ready, _, _ = select.select([self.results.rfd], [], [], timeout) if not self.results.buf else ([1], [], [])
        if not ready:
            self.kill()
            return {"type": "result", "id": request["id"], "ok": False, "stdout": "", "stdout_truncated": False,
                    "error": {"kind": "timeout", "message": "execution exceeded its time limit of %gs" % timeout}}, False
        result = self.results.recv()
        if result is None:
            _, status = os.waitpid(self.pid, 0)
            code = os.waitstatus_to_exitcode(status)
            kind = "memory" if code in (-9, 137) else "crash"
            return {"type": "result", "id": request["id"], "ok": False, "stdout": "", "stdout_truncated": False,
                    "error": {"kind": kind, "message": "the execution process died (exit status %s)" % code}}, False
        return result, True


def main():
    import gc
    # Objects made so far stay shared with forked children instead of being copied.
    gc.freeze()
    host = Channel(0, 1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    warm = Child(persistent=False)
    sessions = {}
    host.send({"type": "ready", "pid": os.getpid()})
    while True:
        msg = host.recv()
        if msg is None:
            break
        kind = msg.get("type")
        if kind == "execute":
            # Rules are checked here, before any process is used; a rejected
            # execution costs no fork.
            try:
                compiled = prepare(msg.get("code", ""), msg.get("tools", []))
            except Rejected as e:
                host.send(rejection(msg, e))
                continue
            msg["compiled"] = base64.b64encode(marshal.dumps(compiled)).decode()
            session = msg.get("session")
            if session:
                child = sessions.get(session)
                if child is None:
                    child = sessions[session] = Child(persistent=True)
                result, alive = child.run(msg)
                if not alive:
                    sessions.pop(session, None)
                host.send(result)
            else:
                child = warm
                result, alive = child.run(msg)
                host.send(result)
                # The next child is forked once the result is on its way, so
                # its fork never delays this one. (Warming the fresh child up
                # ahead of its request was measured: no faster back to back.)
                warm = Child(persistent=False)
                if alive:
                    child.reap()
        elif kind == "close_session":
            child = sessions.pop(msg.get("session"), None)
            if child:
                child.kill()
            host.send({"type": "session_closed", "session": msg.get("session")})
        elif kind == "ping":
            host.send({"type": "pong"})
        # Anything else (a late tool result after a timeout) is ignored.


if __name__ == "__main__":
    main()
