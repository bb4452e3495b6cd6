"""Sandboxes at a steady rate: `Sandbox.create()` and its first command
(`echo hi`), started RATE times a second for SECONDS seconds, each on its
own thread (as agents arrive, not one after another), then killed. Prints
the samples (ms) and any errors as JSON."""

import json
import sys
import threading
import time

from e2b import Sandbox

RATE = float(sys.argv[1])
SECONDS = float(sys.argv[2])

samples, errors = [], []
lock = threading.Lock()


def one():
    started = time.perf_counter()
    try:
        sbx = Sandbox.create(timeout=120)
        out = sbx.commands.run("echo hi")
        took = (time.perf_counter() - started) * 1e3
        if out.stdout != "hi\n":
            raise RuntimeError("echo hi gave %r" % (out.stdout,))
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
