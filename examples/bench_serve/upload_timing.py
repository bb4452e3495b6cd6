"""Times 100 MiB uploads through the E2B Python SDK (`files.write`), one at
a time and four at once, into one sandbox of `dockhand serve`. Prints one
JSON line of samples in milliseconds, then waits for a line on stdin (the
caller measures `docker cp` into the same sandbox meanwhile) and kills the
sandbox."""

import json
import os
import sys
import threading
import time

from e2b import Sandbox

N = int(sys.argv[1])
data = os.urandom(100 << 20)
sbx = Sandbox.create(template="base", timeout=600)
one = []
for i in range(N):
    started = time.perf_counter()
    sbx.files.write("/home/user/up-%d" % i, data)
    one.append((time.perf_counter() - started) * 1e3)
four = []


def upload(n):
    started = time.perf_counter()
    sbx.files.write("/home/user/four-%d" % n, data)
    four.append((time.perf_counter() - started) * 1e3)


threads = [threading.Thread(target=upload, args=(n,)) for n in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"one": one, "four": four, "sandbox": sbx.sandbox_id}), flush=True)
sys.stdin.readline()
sbx.kill()
