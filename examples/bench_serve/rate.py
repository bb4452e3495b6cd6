"""Sandboxes at a steady rate: `Sandbox.create()` and its first step,
started RATE times a second for SECONDS seconds, each on its own thread (as
agents arrive, not one after another), then killed. KIND says which: a
code interpreter and `run_code("1+1")`, or a plain sandbox and
`commands.run("echo hi")`. Prints the samples (ms) and any errors as
JSON."""

import json
import sys
import threading
import time

import e2b
import e2b_code_interpreter

KIND = sys.argv[1]
RATE = float(sys.argv[2])
SECONDS = float(sys.argv[3])

samples, errors = [], []
lock = threading.Lock()


def first_step():
    """The sandbox and what its first step must give back."""
    if KIND == "kernel":
        sbx = e2b_code_interpreter.Sandbox.create(timeout=120)
        return sbx, lambda: sbx.run_code("1+1").text, "2"
    sbx = e2b.Sandbox.create(timeout=120)
    return sbx, lambda: sbx.commands.run("echo hi").stdout, "hi\n"


def one():
    started = time.perf_counter()
    try:
        sbx, step, expected = first_step()
        got = step()
        took = (time.perf_counter() - started) * 1e3
        if got != expected:
            raise RuntimeError("the first step gave %r" % (got,))
        with lock:
            samples.append(took)
        sbx.kill()
    except Exception as e:
        with lock:
            errors.append(repr(e))


threads = []
begin = time.perf_counter()
for i in range(int(RATE * SECONDS)):
    time.sleep(max(0.0, begin + i / RATE - time.perf_counter()))
    thread = threading.Thread(target=one)
    thread.start()
    threads.append(thread)
for thread in threads:
    thread.join()
print(json.dumps({"samples": samples, "errors": errors}))
