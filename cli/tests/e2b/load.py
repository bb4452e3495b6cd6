"""A bounded load on `dockhand serve` through the E2B SDK: N sandboxes
created, used and killed, C at a time. Prints a JSON summary."""

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from e2b import Sandbox

N = int(sys.argv[1])
CONCURRENT = int(sys.argv[2])


def one(i):
    started = time.monotonic()
    sbx = Sandbox.create(template="base", timeout=120, metadata={"load": str(i)})
    created = time.monotonic() - started
    try:
        out = sbx.commands.run(f"echo sandbox-{i}").stdout
        sbx.files.write(f"n{i}.txt", str(i))
        back = sbx.files.read(f"n{i}.txt")
        ok = out == f"sandbox-{i}\n" and back == str(i)
    finally:
        killed = sbx.kill()
    return {"ok": ok and killed, "seconds": time.monotonic() - started, "create": created}


def main():
    errors = []
    results = []
    with ThreadPoolExecutor(CONCURRENT) as pool:
        futures = [pool.submit(one, i) for i in range(N)]
        for f in futures:
            try:
                results.append(f.result())
            except Exception as e:  # noqa: BLE001 - counted and reported
                errors.append(f"{type(e).__name__}: {e}")
    left = Sandbox.list().next_items()
    times = sorted(r["seconds"] for r in results)
    creates = sorted(r["create"] for r in results)
    print(json.dumps({
        "done": sum(r["ok"] for r in results),
        "failed": len(errors) + sum(not r["ok"] for r in results),
        "errors": errors[:5],
        "listed_after": len(left),
        "p50": times[len(times) // 2] if times else None,
        "p95": times[int(len(times) * 0.95)] if times else None,
        "max": times[-1] if times else None,
        "create_p50": creates[len(creates) // 2] if creates else None,
        "create_p95": creates[int(len(creates) * 0.95)] if creates else None,
        "create_max": creates[-1] if creates else None,
    }))


if __name__ == "__main__":
    main()
