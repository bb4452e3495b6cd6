"""dockhand code-host bridge: runs model-written Python in Monty for the host.

Runs as the main process of the long-lived code-host container and speaks JSON
lines on stdin/stdout with the host (see sdk/src/codemode/protocol.rs):

  host -> bridge  {"type": "execute", "id", "code", "inputs", "tools", "session", "type_stubs"}
                  {"type": "tool_result", "call", "ok", "value" | "error"}
                  {"type": "cancel", "id"}
                  {"type": "close_session", "session"}
  bridge -> host  {"type": "ready", "pid"}
                  {"type": "tool_call", "call", "name", "args", "kwargs"}
                  {"type": "result", "id", "ok", "value" | "error", "stdout", "stdout_truncated"}
                  {"type": "session_closed", "session"}

The code runs in Monty (pydantic-monty), in worker processes of its own pool:
Monty is the sandbox, the container around it the second wall. Every
execution gets a fresh Monty session (one is checked out ahead of time, so an
execution costs one feed); a REPL session keeps one Monty session per id.
Limits (time, memory, recursion, host calls) are Monty's; the bridge adds a
wall-clock limit that includes time spent in tools, and the product rules in
rules.py.

Tool calls are Monty external function calls: a call that the code awaits, or
that sits inside gather(...), is answered with a future and runs concurrently
on the host; a plain `x = tool(a)` waits for its value.
"""

import asyncio
import datetime
import json
import math
import os
import sys

import pydantic_monty as pm

import rules

CONFIG = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
LOOP_LIMIT = int(CONFIG.get("loop_limit", 10_000))
PRINT_LIMIT = int(CONFIG.get("print_limit", 16 * 1024))
VALUE_LIMIT = int(CONFIG.get("value_limit", 1 << 20))
TIMEOUT = float(CONFIG.get("timeout_s", 30.0))
MAX_TOOL_CALLS = int(CONFIG.get("max_tool_calls", 10_000))
MAX_SESSIONS = int(CONFIG.get("max_sessions", 8))
# Interpreters checked out ahead, so an execution waits for none.
SPARES = 2
LIMITS = {
    "max_feed_duration_secs": TIMEOUT,
    "max_memory": int(CONFIG.get("memory_bytes", 256 << 20)),
    "max_recursion_depth": int(CONFIG.get("recursion_limit", 200)),
    # Each tool call may cost a call and a future resolution; the prelude a few more.
    "max_suspensions": 2 * MAX_TOOL_CALLS + 100,
}

# Fed to every Monty session before the user's code: what the code may use
# without importing, and the loop guards rules.py inserts. A guard raises
# KeyboardInterrupt, which `except Exception` does not catch; the bridge reports
# it as the loop limit (the time limit stands behind it either way).
PRELUDE = f"""\
import asyncio
from asyncio import gather
import json, math, re, datetime
from collections import Counter, defaultdict
ToolError = RuntimeError


class _DhLoop:
    def __init__(self, it, line):
        self.it = iter(it)
        self.line = line
        self.n = 0

    def __iter__(self):
        return self

    def __next__(self):
        x = next(self.it)
        self.n += 1
        if self.n > {LOOP_LIMIT}:
            raise KeyboardInterrupt("_dh_loop_limit:" + str(self.line))
        return x


def _dh_loop(it, line):
    return _DhLoop(it, line)


_dh_ticks = {{}}


def _dh_tick(k, line):
    n = _dh_ticks.get(k, 0) + 1
    _dh_ticks[k] = n
    if n > {LOOP_LIMIT + 1}:
        raise KeyboardInterrupt("_dh_loop_limit:" + str(line))
    return True
"""

_out = sys.stdout.buffer


def send(message):
    # Monty strings are valid UTF-8; "replace" keeps a stray surrogate from
    # ever breaking the channel.
    text = json.dumps(message, ensure_ascii=False, allow_nan=False)
    _out.write(text.encode("utf-8", "replace") + b"\n")
    _out.flush()


class NotJson(Exception):
    """A value that cannot cross to the host."""


def from_wire(value):
    """Host JSON -> Python values for Monty (tagged datetimes become objects)."""
    if isinstance(value, list):
        return [from_wire(v) for v in value]
    if isinstance(value, dict):
        if len(value) == 1:
            (key, inner), = value.items()
            if key == "$datetime" and isinstance(inner, str):
                return datetime.datetime.fromisoformat(inner)
            if key == "$date" and isinstance(inner, str):
                return datetime.date.fromisoformat(inner)
            if key == "$timedelta" and isinstance(inner, (int, float)):
                return datetime.timedelta(seconds=inner)
        return {k: from_wire(v) for k, v in value.items()}
    return value


def to_wire(value, depth=0):
    """Python values from Monty -> JSON for the host."""
    if depth > 100:
        raise NotJson("the value is nested more than 100 levels deep")
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJson(f"{value!r} is not a JSON number")
        return value
    if isinstance(value, (list, tuple)):
        return [to_wire(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [to_wire(v, depth + 1) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, (str, int, float, bool)) and k is not None:
                raise NotJson(f"a dict key of type {type(k).__name__} is not JSON; use str keys")
            out[k if isinstance(k, str) else json.dumps(k)] = to_wire(v, depth + 1)
        return out
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, (pm.MontyClassProxy,)):
        return to_wire(value.attributes, depth + 1)
    if isinstance(value, (bytes, bytearray)):
        raise NotJson("bytes are not JSON; decode them to str first")
    raise NotJson(f"a value of type {type(value).__name__} is not JSON")


class Printed:
    """print() output, kept up to PRINT_LIMIT characters."""

    def __init__(self):
        self.parts = []
        self.size = 0
        self.cut = False

    def __call__(self, stream, text):
        if self.cut:
            return
        room = PRINT_LIMIT - self.size
        if len(text) > room:
            text = text[:room]
            self.cut = True
        self.parts.append(text)
        self.size += len(text)

    def text(self):
        return "".join(self.parts)


MESSAGE_LIMIT = 4096


def clip(text):
    """Error messages are for a model to read: keep them short."""
    if len(text) <= MESSAGE_LIMIT:
        return text
    return text[:MESSAGE_LIMIT] + f"... ({len(text):,} characters in all)"


class Failed(Exception):
    """Ends an execution with a typed error for the host."""

    def __init__(self, **error):
        error["message"] = clip(str(error.get("message", "")))
        super().__init__(error["message"])
        self.error = error


def frame_of(error, prepared):
    """(line, column) in the user's code of the innermost frame of the user's feed."""
    line = col = 0
    try:
        frames = error.traceback()
    except Exception:
        return 0, 0
    for f in frames:
        # <python-input-0> is the prelude; later feeds are the user's.
        if f.filename.startswith("<python-input-") and f.filename != "<python-input-0>":
            line, col = f.line, f.column
    if prepared is not None and line:
        col = prepared.user_column(line, col)
    return line, col


def runtime_error(error, prepared, tool_errors):
    inner = error.exception()
    kind = type(inner).__name__
    message = str(inner)
    line, col = frame_of(error, prepared)
    if kind == "TimeoutError" and "time limit" in message:
        return Failed(kind="timeout", message=message)
    if kind == "MemoryError" and "memory limit" in message:
        return Failed(kind="memory", message=message)
    if kind == "KeyboardInterrupt" and "_dh_loop_limit" in message:
        loop_line = int("".join(c for c in message.split(":")[-1] if c.isdigit()) or 0)
        return Failed(kind="loop_limit", line=loop_line,
                      message=f"the loop at line {loop_line} ran more than {LOOP_LIMIT:,} iterations")
    if kind == "RuntimeError" and message in tool_errors:
        return Failed(kind="tool", message=message, line=line, col=col)
    return Failed(kind="runtime", type=kind, message=message, line=line, col=col)


def typing_error(error, prepared):
    text = error.display()
    line = col = 0
    for word in text.split():
        parts = word.rstrip(":").split(":")
        if len(parts) >= 3 and parts[-2].isdigit() and parts[-1].isdigit():
            line, col = int(parts[-2]), int(parts[-1])
            break
    if prepared is not None and line:
        col = prepared.user_column(line, col)
    return Failed(kind="validation", rule="type", message=text.strip(), line=line, col=col)


class Execution:
    """One execution: drives Monty's snapshots and answers its host calls."""

    def __init__(self, bridge, request):
        self.bridge = bridge
        self.request = request
        self.tools = set(request.get("tools") or [])
        self.printed = Printed()
        self.prepared = None
        self.tool_errors = set()
        self.calls = 0
        self.waiting = {}  # Monty call_id -> host call number
        self.settled = {}  # Monty call_id -> ExternalSettledResult

    async def run(self, session):
        try:
            self.prepared = rules.prepare(self.request["code"], self.tools)
        except rules.Rejected as e:
            raise Failed(kind="validation", rule=e.rule, message=str(e), line=e.line, col=e.col)
        try:
            inputs = {k: from_wire(v) for k, v in (self.request.get("inputs") or {}).items()}
            snapshot = await session.feed_start(
                self.prepared.code, inputs=inputs or None, print_callback=self.printed)
            while not isinstance(snapshot, pm.MontyComplete):
                snapshot = await self.answer(snapshot)
            value = snapshot.output
        except pm.MontySyntaxError as e:
            line, col = frame_of(e, None)
            raise Failed(kind="validation", rule="syntax", message=str(e), line=line, col=col)
        except pm.MontyTypingError as e:
            raise typing_error(e, self.prepared)
        except pm.MontyCrashedError as e:
            if e.timed_out:
                raise Failed(kind="timeout", message=str(e))
            raise Failed(kind="crash", message=f"the interpreter's worker died: {e}")
        except pm.MontyRuntimeError as e:
            raise runtime_error(e, self.prepared, self.tool_errors)
        except pm.MontyError as e:
            raise Failed(kind="crash", message=str(e))
        try:
            wire = to_wire(value)
            size = len(json.dumps(wire, ensure_ascii=False))
        except NotJson as e:
            raise Failed(kind="value", message=str(e))
        if size > VALUE_LIMIT:
            raise Failed(kind="output_limit",
                         message=f"the final value is {size:,} bytes of JSON; the limit is {VALUE_LIMIT:,}")
        return wire

    async def answer(self, snapshot):
        if isinstance(snapshot, pm.AsyncNameLookupSnapshot):
            return await snapshot.resume()  # an undefined name: NameError
        if isinstance(snapshot, pm.AsyncFutureSnapshot):
            return await snapshot.resume(await self.settle(snapshot.pending_call_ids))
        if snapshot.is_os_function:
            return await snapshot.resume_not_handled()
        name = snapshot.function_name
        if name not in self.tools:
            return await snapshot.resume(
                {"exc_type": "NameError", "message": f"name '{name}' is not defined"})
        self.calls += 1
        if self.calls > MAX_TOOL_CALLS:
            raise Failed(kind="tool_limit",
                         message=f"the code made more than {MAX_TOOL_CALLS:,} tool calls")
        try:
            args = [to_wire(a) for a in snapshot.args]
            kwargs = {k: to_wire(v) for k, v in snapshot.kwargs.items()}
        except NotJson as e:
            return await snapshot.resume({"exc_type": "TypeError", "message": f"{name}(): {e}"})
        number = self.bridge.call_tool(name, args, kwargs)
        if snapshot.position.start in self.prepared.sync_calls:
            return await snapshot.resume(await self.bridge.tool_reply(number, self))
        self.waiting[snapshot.call_id] = number
        return await snapshot.resume({"future": ...})

    async def settle(self, pending):
        """Waits until at least one pending call is answered; returns all answered."""
        ready = {i: self.settled.pop(i) for i in pending if i in self.settled}
        if ready:
            return ready
        waits = {asyncio.ensure_future(self.bridge.tool_reply(self.waiting[i], self)): i
                 for i in pending if i in self.waiting}
        if not waits:
            raise Failed(kind="crash", message="the code waits on a call the bridge never made")
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in waits:
            if task in done:
                ready[waits[task]] = task.result()
            else:
                task.cancel()
        for i in ready:
            self.waiting.pop(i, None)
        return ready

    def tool_failed(self, message):
        self.tool_errors.add(message)
        return {"exc_type": "RuntimeError", "message": message}


class Bridge:
    def __init__(self, pool):
        self.pool = pool
        self.spares = []  # tasks of checked-out sessions with the prelude fed
        self.sessions = {}  # REPL id -> (context manager, session)
        self.calls = 0
        self.replies = {}  # host call number -> future of the reply message
        self.running = {}  # execution id -> task

    async def _fresh(self, type_stubs=None):
        options = {"limits": LIMITS}
        if type_stubs is not None:
            options.update(type_check=True, type_check_stubs=type_stubs,
                           type_check_format="concise")
        manager = self.pool.checkout(**options)
        session = await manager.__aenter__()
        try:
            await session.feed_run(PRELUDE)
        except BaseException:
            await self._discard(manager)
            raise
        return manager, session

    async def _discard(self, manager):
        try:
            await manager.__aexit__(None, None, None)
        except Exception:
            pass

    def refill(self):
        while len(self.spares) < SPARES:
            self.spares.append(asyncio.ensure_future(self._fresh()))

    async def take_fresh(self, type_stubs):
        if type_stubs is not None:
            return await self._fresh(type_stubs)
        # The first spare that is ready, else the oldest. Refilling waits
        # until the result is sent: it would compete with this execution.
        if not self.spares:
            self.refill()
        ready = [s for s in self.spares if s.done()]
        spare = ready[0] if ready else self.spares[0]
        self.spares.remove(spare)
        try:
            return await spare
        except Exception:
            return await self._fresh()

    def call_tool(self, name, args, kwargs):
        self.calls += 1
        self.replies[self.calls] = asyncio.get_running_loop().create_future()
        send({"type": "tool_call", "call": self.calls, "name": name, "args": args, "kwargs": kwargs})
        return self.calls

    async def tool_reply(self, number, execution):
        message = await asyncio.shield(self.replies[number])
        self.replies.pop(number, None)
        if message.get("ok"):
            try:
                return {"return_value": from_wire(message.get("value"))}
            except ValueError as e:
                return execution.tool_failed(f"the tool's result could not be read: {e}")
        return execution.tool_failed(str(message.get("error") or "the tool failed"))

    def deliver(self, message):
        future = self.replies.get(message.get("call"))
        if future is not None and not future.done():
            future.set_result(message)

    async def execute(self, request):
        session_id = request.get("session")
        execution = Execution(self, request)
        manager = None
        try:
            if session_id is None:
                manager, session = await self.take_fresh(request.get("type_stubs"))
            else:
                session = await self.repl(session_id, request.get("type_stubs"))
            value = await asyncio.wait_for(execution.run(session), TIMEOUT)
            result = {"ok": True, "value": value}
        except Failed as f:
            result = {"ok": False, "error": f.error}
        except asyncio.TimeoutError:
            result = {"ok": False, "error": {
                "kind": "timeout", "message": f"the execution ran longer than {TIMEOUT}s"}}
        except asyncio.CancelledError:
            result = {"ok": False, "error": {"kind": "cancelled", "message": "cancelled by the host"}}
        except Exception as e:  # the bridge must answer whatever happened
            result = {"ok": False, "error": {"kind": "crash", "message": f"{type(e).__name__}: {e}"}}
        if not result["ok"] and session_id is not None and result["error"]["kind"] in (
                "timeout", "memory", "crash", "cancelled", "loop_limit", "tool_limit"):
            # Monty keeps no promise about a heap a limit stopped mid-operation.
            await self.close_session(session_id)
        for number in list(self.replies):
            self.replies.pop(number).cancel()
        self.running.pop(request["id"], None)
        result.update(type="result", id=request["id"], stdout=execution.printed.text(),
                      stdout_truncated=execution.printed.cut)
        send(result)
        self.refill()
        if manager is not None:
            await self._discard(manager)

    async def repl(self, session_id, type_stubs):
        if session_id not in self.sessions:
            if len(self.sessions) >= MAX_SESSIONS:
                raise Failed(kind="session_limit", message=(
                    f"{MAX_SESSIONS} sessions are open on this host; close one first"))
            self.sessions[session_id] = await self._fresh(type_stubs)
        return self.sessions[session_id][1]

    async def close_session(self, session_id):
        entry = self.sessions.pop(session_id, None)
        if entry is not None:
            await self._discard(entry[0])

    def cancel(self, execution_id):
        task = self.running.get(execution_id)
        if task is not None:
            task.cancel()


async def stdin_lines():
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=256 << 20)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


async def serve(bridge, reader):
    while True:
        line = await reader.readline()
        if not line:
            return
        try:
            message = json.loads(line)
        except ValueError:
            continue
        kind = message.get("type")
        if kind == "execute":
            task = asyncio.ensure_future(bridge.execute(message))
            bridge.running[message["id"]] = task
        elif kind == "tool_result":
            bridge.deliver(message)
        elif kind == "cancel":
            bridge.cancel(message.get("id"))
        elif kind == "close_session":
            await bridge.close_session(message.get("session"))
            send({"type": "session_closed", "session": message.get("session")})


async def main():
    reader = await stdin_lines()
    pool = pm.AsyncMonty(min_processes=SPARES + 1, max_processes=MAX_SESSIONS + SPARES + 1,
                         checkout_timeout=10.0, feed_duration_limit_grace=1.0)
    async with pool:
        bridge = Bridge(pool)
        bridge.refill()
        await bridge.spares[0]
        send({"type": "ready", "pid": os.getpid()})
        await serve(bridge, reader)
    # The host closed stdin: leave without waiting for anything.
    os._exit(0)


if __name__ == "__main__":
    asyncio.run(main())
