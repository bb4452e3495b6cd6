"""Hostile clients of `dockhand serve`, with nothing but the standard library.

  flood.py unauth URL COUNT MIB   COUNT bodies of MIB MiB at once to each
                                  of three routes, with no key or token
  flood.py creates URL KEY N AT   N creates, AT at a time, with KEY
  flood.py raw URL KEY METHOD PATH BODY   one call; its status and body
  flood.py uploads URL ID TOKEN COUNT MIB   COUNT uploads of MIB MiB at once
                                  to one sandbox (`/home/user/up-<n>`)

Prints one JSON line.
"""

import json
import socket
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor


def send_big(url, path, headers, mib):
    """Sends a body of `mib` MiB in 1 MiB writes; what came back (a status,
    or how the connection ended) and how long it took."""
    u = urllib.parse.urlsplit(url)
    started = time.time()
    s = socket.create_connection((u.hostname, u.port), timeout=60)
    head = "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n" % (path, u.netloc, mib << 20)
    head += "".join("%s: %s\r\n" % kv for kv in headers.items()) + "\r\n"
    chunk = b"x" * (1 << 20)
    sent = 0
    try:
        s.sendall(head.encode())
        for _ in range(mib):
            s.sendall(chunk)
            sent += 1
    except OSError as e:
        ended = type(e).__name__
    else:
        ended = "sent"
    try:
        reply = s.recv(65536).decode(errors="replace")
        status = int(reply.split(" ", 2)[1]) if reply.startswith("HTTP/") else None
    except OSError as e:
        status, ended = None, ended + "/" + type(e).__name__
    s.close()
    return {"status": status, "ended": ended, "sent_mib": sent, "secs": round(time.time() - started, 2)}


def unauth(url, count, mib):
    routes = [
        ("/sandboxes", {"Content-Type": "application/json"}),
        ("/process.Process/Start", {"Content-Type": "application/json", "E2b-Sandbox-Id": "guessed-id"}),
        ("/files?path=/tmp/x", {"Content-Type": "application/octet-stream", "E2b-Sandbox-Id": "guessed-id"}),
    ]
    jobs = [(p, h) for p, h in routes for _ in range(count)]
    with ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(lambda j: dict(send_big(url, j[0], j[1], mib), route=j[0]), jobs))
    return {"results": results}


def upload(url, sandbox, token, path, mib):
    """Streams `mib` MiB (a known pattern) as an octet-stream upload."""
    u = urllib.parse.urlsplit(url)
    started = time.time()
    s = socket.create_connection((u.hostname, u.port), timeout=600)
    head = ("POST /files?path=%s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n"
            "Content-Type: application/octet-stream\r\nE2b-Sandbox-Id: %s\r\nX-Access-Token: %s\r\n\r\n"
            % (urllib.parse.quote(path), u.netloc, mib << 20, sandbox, token))
    block = bytes(range(256)) * 4096
    try:
        s.sendall(head.encode())
        for _ in range(mib):
            s.sendall(block)
        ended = "sent"
    except OSError as e:
        ended = type(e).__name__
    reply = b""
    try:
        while b"\r\n\r\n" not in reply:
            got = s.recv(65536)
            if not got:
                break
            reply += got
    except OSError as e:
        ended += "/" + type(e).__name__
    s.close()
    text = reply.decode(errors="replace")
    status = int(text.split(" ", 2)[1]) if text.startswith("HTTP/") else None
    return {"path": path, "status": status, "ended": ended, "secs": round(time.time() - started, 2)}


def uploads(url, sandbox, token, count, mib):
    with ThreadPoolExecutor(count) as pool:
        results = list(pool.map(lambda n: upload(url, sandbox, token, "up-%d" % n, mib), range(count)))
    return {"results": results}


def call(url, key, method, path, body, headers=None):
    """One call: its status and body (and, given a dict, its headers, by
    lower-case name)."""
    req = urllib.request.Request(url + path, data=body.encode() if body is not None else None, method=method)
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("X-API-Key", key)
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            if headers is not None:
                headers.update((k.lower(), v) for k, v in r.headers.items())
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        if headers is not None:
            headers.update((k.lower(), v) for k, v in e.headers.items())
        return e.code, e.read().decode(errors="replace")


def creates(url, key, n, at):
    def one(_):
        headers = {}
        status, text = call(url, key, "POST", "/sandboxes", json.dumps({"templateID": "base", "timeout": 300}), headers)
        try:
            body = json.loads(text)
        except ValueError:
            body = {"raw": text[:200]}
        if status == 429:
            retry_after.add(headers.get("retry-after"))
        return status, body

    retry_after = set()

    with ThreadPoolExecutor(at) as pool:
        got = list(pool.map(one, range(n)))
    statuses = {}
    for status, _ in got:
        statuses[str(status)] = statuses.get(str(status), 0) + 1
    ids = [b.get("sandboxID") for s, b in got if s == 201]
    shapes = sorted({(s, tuple(sorted(b.keys())), b.get("code")) for s, b in got if s != 201}, key=str)
    messages = sorted({b.get("message", "") for s, b in got if s != 201})
    return {"statuses": statuses, "ids": ids, "shapes": [list(map(str, x)) for x in shapes], "messages": messages,
            "retry_after": sorted(str(r) for r in retry_after)}


def main():
    mode = sys.argv[1]
    if mode == "unauth":
        out = unauth(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif mode == "creates":
        out = creates(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif mode == "uploads":
        out = uploads(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
    elif mode == "raw":
        status, text = call(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6])
        out = {"status": status, "body": text}
    else:
        raise SystemExit("unknown mode " + mode)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
