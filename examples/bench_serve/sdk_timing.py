"""Times `dockhand serve` through the E2B Python SDK, and the same requests
made by hand with httpx (the server's share without the SDK's). Prints one
JSON object of samples in milliseconds."""

import json
import os
import sys
import threading
import time

import httpx
from e2b import Sandbox
from e2b_code_interpreter import Sandbox as CodeSandbox

N = int(sys.argv[1])
PAUSE = float(sys.argv[2])  # seconds between samples, for pools to refill
URL = os.environ["E2B_API_URL"]
KEY = os.environ["E2B_API_KEY"]


def sdk_time_to_interactive():
    """create -> the first command's first output, through the SDK."""
    started = time.perf_counter()
    first = threading.Event()
    seen = {}

    def on_stdout(_line):
        if not first.is_set():
            seen["at"] = time.perf_counter()
            first.set()

    sbx = Sandbox.create(template="base", timeout=60)
    created = time.perf_counter()
    sbx.commands.run("echo ready", on_stdout=on_stdout)
    sbx.kill()
    return (created - started) * 1e3, (seen["at"] - started) * 1e3


def envelope(message):
    body = json.dumps(message).encode()
    return bytes([0]) + len(body).to_bytes(4, "big") + body


def raw_time_to_interactive(client):
    """The same two requests with no SDK: POST /sandboxes, then Start
    read up to its first data event."""
    started = time.perf_counter()
    r = client.post(URL + "/sandboxes", json={"templateID": "base", "timeout": 60},
                    headers={"X-API-KEY": KEY})
    r.raise_for_status()
    sbx = r.json()
    headers = {"E2b-Sandbox-Id": sbx["sandboxID"], "X-Access-Token": sbx["envdAccessToken"],
               "Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"}
    start = {"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo ready"]}}
    at = None
    with client.stream("POST", URL + "/process.Process/Start", content=envelope(start),
                       headers=headers) as s:
        buf = b""
        for chunk in s.iter_bytes():
            buf += chunk
            if b'"data"' in buf and at is None:
                at = time.perf_counter()
    client.delete(URL + "/sandboxes/" + sbx["sandboxID"], headers={"X-API-KEY": KEY})
    return (at - started) * 1e3


def run_code_samples(n):
    sbx = CodeSandbox.create(timeout=120)
    sbx.run_code("1 + 1")  # the context's kernel is warm from here
    out = []
    for _ in range(n):
        t = time.perf_counter()
        ex = sbx.run_code("1 + 1")
        out.append((time.perf_counter() - t) * 1e3)
        assert ex.text == "2", ex
    sbx.kill()
    return out


def main():
    create, tti, raw = [], [], []
    with httpx.Client() as client:
        for _ in range(N):
            c, t = sdk_time_to_interactive()
            create.append(c)
            tti.append(t)
            time.sleep(PAUSE)
            raw.append(raw_time_to_interactive(client))
            time.sleep(PAUSE)
    result = {"sdk_create": create, "sdk_tti": tti, "raw_tti": raw}
    if len(sys.argv) > 3 and sys.argv[3] == "run_code":
        result["run_code"] = run_code_samples(N)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
