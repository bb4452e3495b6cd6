"""N `Sandbox.create()` at once through the E2B SDK (one thread each),
then every sandbox killed. Prints each create's seconds and the errors,
as one JSON line."""

import json
import sys
import threading
import time

from e2b import Sandbox

N = int(sys.argv[1])


def main():
    go = threading.Event()
    made, errors, seconds = [], [], []
    lock = threading.Lock()

    def one():
        go.wait()
        started = time.monotonic()
        try:
            sbx = Sandbox.create(template="base", timeout=300)
        except Exception as e:  # noqa: BLE001 - counted and reported
            with lock:
                errors.append(f"{type(e).__name__}: {e}")
            return
        with lock:
            seconds.append(time.monotonic() - started)
            made.append(sbx)

    threads = [threading.Thread(target=one) for _ in range(N)]
    for t in threads:
        t.start()
    go.set()
    for t in threads:
        t.join()
    for sbx in made:
        try:
            sbx.kill()
        except Exception:  # noqa: BLE001 - the server's shutdown ends it anyway
            pass
    print(json.dumps({"seconds": seconds, "errors": errors}))


if __name__ == "__main__":
    main()
