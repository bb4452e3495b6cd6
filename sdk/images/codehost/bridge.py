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
on the host; a plain `x = tool(a)` waits for its value. A gather over a
comprehension of calls of one tool is one external call for all of them (see
rules.py and bridge/src/fanout.rs).

Threads, not asyncio: Monty's synchronous session API releases the GIL while
its worker runs and answers a suspension several times faster than the
asynchronous one. The main thread reads stdin and routes messages; each
execution runs on a thread of its own and waits on its own inbox for the
host's tool results.
"""

import json
import os
import pathlib
import queue
import signal
import sys
import threading
import time

import pydantic_monty as pm

import rules
from failures import Failed, frame_of, runtime_error, typing_error
from values import NotJson, argument_to_wire, from_wire, to_wire

CONFIG = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
LOOP_LIMIT = int(CONFIG.get("loop_limit", 10_000))
PRINT_LIMIT = int(CONFIG.get("print_limit", 16 * 1024))
VALUE_LIMIT = int(CONFIG.get("value_limit", 1 << 20))
TIMEOUT = float(CONFIG.get("timeout_s", 30.0))
MAX_TOOL_CALLS = int(CONFIG.get("max_tool_calls", 10_000))
MAX_SESSIONS = int(CONFIG.get("max_sessions", 8))
# The external function a fanned-out gather calls (rules.py, the prelude).
FANOUT_FUNCTION = "_dh_fanout"
# Interpreters checked out ahead, so an execution waits for none.
SPARES = 2
LIMITS = {
    "max_feed_duration_secs": TIMEOUT,
    "max_memory": int(CONFIG.get("memory_bytes", 256 << 20)),
    "max_recursion_depth": int(CONFIG.get("recursion_limit", 200)),
    # Each tool call may cost a call and a future resolution; the prelude a few more.
    "max_suspensions": 2 * MAX_TOOL_CALLS + 100,
}

# Fed to every Monty session before the user's code (see prelude.py, which
# the compiled bridge feeds too).
PRELUDE = (
    pathlib.Path(__file__)
    .with_name("prelude.py")
    .read_text()
    .replace("__DH_LOOP_LIMIT__", str(LOOP_LIMIT))
    .replace("__DH_TICK_LIMIT__", str(LOOP_LIMIT + 1))
)

_out = sys.stdout.buffer
_out_lock = threading.Lock()


def send(message):
    # Monty strings are valid UTF-8; "replace" keeps a stray surrogate from
    # ever breaking the channel.
    text = json.dumps(message, ensure_ascii=False, allow_nan=False)
    line = text.encode("utf-8", "replace") + b"\n"
    with _out_lock:
        _out.write(line)
        _out.flush()


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


class _Fan:
    """The host calls of a fan-out: in the comprehension's order, how many
    have no reply yet, and the first that failed."""

    def __init__(self, numbers):
        self.numbers = numbers
        self.remaining = len(numbers)
        self.failed = None


class Cancelled(Exception):
    """The host gave up on the execution."""


# Put in an execution's inbox to wake it when it is cancelled.
_CANCEL = object()


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
        self.deadline = time.monotonic() + TIMEOUT
        self.inbox = queue.SimpleQueue()  # (host call number, reply) or _CANCEL
        self.answered = {}  # host call number -> reply not consumed yet
        self.waiting = {}  # Monty call_id -> host call number, or a _Fan
        self.fan_of = {}  # host call number -> the fan-out's call_id, until answered
        # A REPL session may have bound a tool's name or `gather` earlier;
        # type checking checks each call's arguments against the stubs.
        self.fan_out = request.get("session") is None and request.get("type_stubs") is None
        self.worker_pid = None
        self.pid_lock = threading.Lock()
        self.cancelled = False

    def run(self, session):
        # Read now: a session reports no worker while a feed runs on it.
        with self.pid_lock:
            self.worker_pid = session.worker_pid
        try:
            return self.drive(session)
        finally:
            # From here the worker may serve someone else: never kill it.
            with self.pid_lock:
                self.worker_pid = None

    def drive(self, session):
        try:
            self.prepared = rules.prepare(self.request["code"], self.tools, fan_out=self.fan_out)
        except rules.Rejected as e:
            raise Failed(kind="validation", rule=e.rule, message=str(e), line=e.line, col=e.col)
        try:
            inputs = {k: from_wire(v) for k, v in (self.request.get("inputs") or {}).items()}
            snapshot = session.feed_start(
                self.prepared.code, inputs=inputs or None, print_callback=self.printed)
            while not isinstance(snapshot, pm.MontyComplete):
                snapshot = self.answer(snapshot)
            value = snapshot.output
        except pm.MontySyntaxError as e:
            line, col = frame_of(e, None)
            raise Failed(kind="validation", rule="syntax", message=str(e), line=line, col=col)
        except pm.MontyTypingError as e:
            raise typing_error(e, self.prepared)
        except pm.MontyCrashedError as e:
            if self.cancelled:
                raise Cancelled()
            if e.timed_out:
                raise Failed(kind="timeout", message=str(e))
            raise Failed(kind="crash", message=f"the interpreter's worker died: {e}")
        except pm.MontyRuntimeError as e:
            raise runtime_error(e, self.prepared, self.tool_errors, LOOP_LIMIT)
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

    def answer(self, snapshot):
        if isinstance(snapshot, pm.NameLookupSnapshot):
            return snapshot.resume()  # an undefined name: NameError
        if isinstance(snapshot, pm.FutureSnapshot):
            return snapshot.resume(self.settle(snapshot.pending_call_ids))
        if snapshot.is_os_function:
            return snapshot.resume_not_handled()
        name = snapshot.function_name
        if name == FANOUT_FUNCTION:
            return snapshot.resume(self.fan(snapshot))
        if name not in self.tools:
            return snapshot.resume(
                {"exc_type": "NameError", "message": f"name '{name}' is not defined"})
        self.count_calls(1)
        try:
            args = [argument_to_wire(a) for a in snapshot.args]
            kwargs = {k: argument_to_wire(v) for k, v in snapshot.kwargs.items()}
        except NotJson as e:
            # As the host fails every other bad argument: a ToolError.
            return snapshot.resume(self.tool_failed(f"{name}(): {e}"))
        number = self.bridge.call_tool(name, args, kwargs, self)
        if snapshot.position.start in self.prepared.sync_calls:
            return snapshot.resume(self.result_of(self.wait_for(number)))
        self.waiting[snapshot.call_id] = number
        return snapshot.resume({"future": ...})

    def fan(self, snapshot):
        """`_dh_fanout(packs)`: every `(name, (args, kwargs))` pack becomes a
        host call, all answered by one future."""
        packs = snapshot.args[0] if snapshot.args else ()
        self.count_calls(len(packs))
        calls = []
        for pack in packs:
            try:
                name, (args, kwargs) = pack
            except (TypeError, ValueError):
                raise Failed(kind="crash", message="a fan-out call came malformed")
            if name not in self.tools:
                raise Failed(kind="crash", message="a fan-out named no tool")
            try:
                calls.append((name, [argument_to_wire(a) for a in args],
                              {k: argument_to_wire(v) for k, v in kwargs.items()}))
            except NotJson as e:
                # As the call itself would have raised: before any went out.
                return self.tool_failed(f"{name}(): {e}")
        numbers = [self.bridge.call_tool(n, a, k, self) for n, a, k in calls]
        self.waiting[snapshot.call_id] = _Fan(numbers)
        for number in numbers:
            self.fan_of[number] = snapshot.call_id
        return {"future": ...}

    def count_calls(self, n):
        self.calls += n
        if self.calls > MAX_TOOL_CALLS:
            raise Failed(kind="tool_limit",
                         message=f"the code made more than {MAX_TOOL_CALLS:,} tool calls")

    def wait_for(self, number):
        """The reply to host call `number`."""
        while number not in self.answered:
            self.receive()
        return self.answered.pop(number)

    def receive(self):
        """Waits for at least one reply and files every other one queued, so
        gathered calls resume together."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise Failed(kind="timeout", message=f"the execution ran longer than {TIMEOUT}s")
        try:
            item = self.inbox.get(timeout=remaining)
        except queue.Empty:
            return
        while True:
            if item is _CANCEL:
                raise Cancelled()
            self.file(*item)
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                return

    def file(self, number, reply):
        """Keeps a reply; a fan-out's count and first failure as they come."""
        fan = self.waiting.get(self.fan_of.pop(number, None))
        if isinstance(fan, _Fan):
            fan.remaining -= 1
            if fan.failed is None and not reply.get("ok"):
                fan.failed = number
        self.answered[number] = reply

    def settle(self, pending):
        """Results for at least one pending future, and every other one ready."""
        if not any(i in self.waiting for i in pending):
            raise Failed(kind="crash", message="the code waits on a call the bridge never made")
        while True:
            settled = {}
            for call_id in pending:
                result = self.settled(call_id)
                if result is not None:
                    settled[call_id] = result
            if settled:
                return settled
            self.receive()

    def settled(self, call_id):
        """The result of future `call_id` if its replies are in: a fan-out's
        values in order, or its first failure, as gather gives them."""
        waiting = self.waiting.get(call_id)
        if isinstance(waiting, _Fan):
            number = waiting.failed
            if number is None and waiting.remaining:
                return None
        elif waiting is None or waiting not in self.answered:
            return None
        else:
            number = waiting
        del self.waiting[call_id]
        if number is not None:
            return self.result_of(self.answered.pop(number))
        values = []
        for n in waiting.numbers:
            result = self.result_of(self.answered.pop(n, {}))
            if "return_value" not in result:
                return result
            values.append(result["return_value"])
        return {"return_value": values}

    def result_of(self, reply):
        if reply.get("ok"):
            try:
                return {"return_value": from_wire(reply.get("value"))}
            except ValueError as e:
                return self.tool_failed(f"the tool's result could not be read: {e}")
        return self.tool_failed(str(reply.get("error") or "the tool failed"))

    def tool_failed(self, message):
        self.tool_errors.add(message)
        return {"exc_type": "RuntimeError", "message": message}

    def cancel(self):
        self.cancelled = True
        self.inbox.put(_CANCEL)
        # Monty may be computing: its worker is the only thing that can stop it.
        with self.pid_lock:
            if self.worker_pid:
                try:
                    os.kill(self.worker_pid, signal.SIGKILL)
                except OSError:
                    pass


# Errors after which a REPL session's heap cannot be trusted (or is gone).
SESSION_ENDING = ("timeout", "memory", "crash", "cancelled", "loop_limit", "tool_limit")


class Bridge:
    def __init__(self, pool):
        self.pool = pool
        self.spares = queue.SimpleQueue()  # checked-out sessions with the prelude fed
        self.refills = threading.Semaphore(0)
        self.sessions = {}  # REPL id -> [session, lock]
        self.lock = threading.Lock()
        self.calls = 0
        self.owners = {}  # host call number -> execution waiting for its reply
        self.running = {}  # execution id -> Execution

    def fresh(self, type_stubs=None):
        options = {"limits": LIMITS}
        if type_stubs is not None:
            options.update(type_check=True, type_check_stubs=type_stubs,
                           type_check_format="concise")
        session = self.pool.checkout(**options)
        session.__enter__()
        try:
            session.feed_run(PRELUDE)
        except BaseException:
            discard(session)
            raise
        return session

    def refill_forever(self):
        """Keeps SPARES sessions ready; woken once per spare taken."""
        # main() made the first one.
        for _ in range(SPARES - 1):
            self.refills.release()
        while True:
            self.refills.acquire()
            try:
                self.spares.put(self.fresh())
            except Exception as e:
                sys.stderr.write(f"could not prepare an interpreter: {e}\n")
                time.sleep(0.5)
                self.refills.release()

    def take_fresh(self, type_stubs):
        if type_stubs is not None:
            return self.fresh(type_stubs)
        try:
            session = self.spares.get(timeout=10)
        except queue.Empty:
            return self.fresh()
        return session

    def call_tool(self, name, args, kwargs, execution):
        with self.lock:
            self.calls += 1
            number = self.calls
            self.owners[number] = execution
        send({"type": "tool_call", "call": number, "name": name, "args": args, "kwargs": kwargs})
        return number

    def deliver(self, message):
        with self.lock:
            execution = self.owners.pop(message.get("call"), None)
        if execution is not None:
            execution.inbox.put((message.get("call"), message))

    def execute(self, request):
        session_id = request.get("session")
        execution = Execution(self, request)
        self.running[request["id"]] = execution
        fresh = None
        entry = None
        try:
            if session_id is None:
                fresh = self.take_fresh(request.get("type_stubs"))
                value = execution.run(fresh)
            else:
                entry = self.repl(session_id, request.get("type_stubs"))
                with entry[1]:
                    value = execution.run(entry[0])
            result = {"ok": True, "value": value}
        except Failed as f:
            result = {"ok": False, "error": f.error}
        except Cancelled:
            result = {"ok": False, "error": {"kind": "cancelled", "message": "cancelled by the host"}}
        except Exception as e:  # the bridge must answer whatever happened
            result = {"ok": False, "error": {"kind": "crash", "message": f"{type(e).__name__}: {e}"}}
        if not result["ok"] and session_id is not None and result["error"]["kind"] in SESSION_ENDING:
            # Monty keeps no promise about a heap a limit stopped mid-operation.
            self.close_session(session_id)
        with self.lock:
            for number in [n for n, e in self.owners.items() if e is execution]:
                del self.owners[number]
        self.running.pop(request["id"], None)
        result.update(type="result", id=request["id"], stdout=execution.printed.text(),
                      stdout_truncated=execution.printed.cut)
        send(result)
        if fresh is not None:
            # After the result: preparing the next one would compete with this one.
            if request.get("type_stubs") is None:
                self.refills.release()
            discard(fresh)

    def repl(self, session_id, type_stubs):
        with self.lock:
            entry = self.sessions.get(session_id)
            if entry is None and len(self.sessions) >= MAX_SESSIONS:
                raise Failed(kind="session_limit", message=(
                    f"{MAX_SESSIONS} sessions are open on this host; close one first"))
        if entry is None:
            entry = [self.fresh(type_stubs), threading.Lock()]
            with self.lock:
                self.sessions[session_id] = entry
        return entry

    def close_session(self, session_id):
        with self.lock:
            entry = self.sessions.pop(session_id, None)
        if entry is not None:
            discard(entry[0])

    def cancel(self, execution_id):
        execution = self.running.get(execution_id)
        if execution is not None:
            execution.cancel()


def discard(session):
    try:
        session.__exit__(None, None, None)
    except Exception:
        pass


def spawn(target, *args):
    threading.Thread(target=target, args=args, daemon=True).start()


class Workers:
    """Threads started once that run executions: handing a request to one
    that waits costs far less than starting a thread per execution."""

    def __init__(self, count):
        self.jobs = queue.SimpleQueue()
        for _ in range(count):
            spawn(self.work)

    def work(self):
        while True:
            job, arg = self.jobs.get()
            job(arg)

    def run(self, job, arg):
        self.jobs.put((job, arg))


def serve(bridge):
    # Every REPL session and a fresh execution may run at once.
    workers = Workers(MAX_SESSIONS + 2)
    for line in sys.stdin.buffer:
        try:
            message = json.loads(line)
        except ValueError:
            continue
        kind = message.get("type")
        if kind == "execute":
            workers.run(bridge.execute, message)
        elif kind == "tool_result":
            bridge.deliver(message)
        elif kind == "cancel":
            bridge.cancel(message.get("id"))
        elif kind == "close_session":
            bridge.close_session(message.get("session"))
            send({"type": "session_closed", "session": message.get("session")})


def main():
    pool = pm.Monty(min_processes=SPARES + 1, max_processes=MAX_SESSIONS + SPARES + 1,
                    checkout_timeout=10.0, feed_duration_limit_grace=1.0)
    pool.__enter__()
    bridge = Bridge(pool)
    first = bridge.fresh()
    bridge.spares.put(first)
    spawn(bridge.refill_forever)
    send({"type": "ready", "pid": os.getpid()})
    serve(bridge)
    # The host closed stdin: leave without waiting for anything.
    os._exit(0)


if __name__ == "__main__":
    main()
