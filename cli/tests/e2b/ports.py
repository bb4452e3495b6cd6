"""Ports inside sandboxes through `dockhand serve`, as the E2B SDK reaches
them: `get_host(port)` addresses routed by the Host header, HTTP (httpx)
and WebSocket (the `websockets` client), with and without the traffic token.

ports.py SERVERS_PY -> one JSON line of what was seen.
"""
import hashlib
import json
import os
import socket
import sys
import time

import httpx
from e2b import Sandbox
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

TOKEN = "e2b-traffic-access-token"
api = os.environ["E2B_API_URL"]
ip, port = api.split("//", 1)[1].rstrip("/").rsplit(":", 1)
servers = open(sys.argv[1]).read()
out = {}


def get(host, path, token=None):
    headers = {"Host": host}
    if token is not None:
        headers[TOKEN] = token
    return httpx.get(f"http://{ip}:{port}{path}", headers=headers, timeout=60)


def up(host, token=None):
    deadline = time.time() + 30
    while time.time() < deadline:
        if get(host, "/", token).status_code == 200:
            return True
        time.sleep(0.2)
    return False


def websocket(host, headers):
    sock = socket.create_connection((ip, int(port)))
    try:
        with connect(f"ws://{host}/", sock=sock, additional_headers=headers,
                     open_timeout=30, max_size=None) as ws:
            ws.send("hi from the SDK")
            text = ws.recv(timeout=30)
            blob = os.urandom(200_000)
            ws.send(blob)
            back = ws.recv(timeout=30)
            return {"text": text, "binary_same": back == blob}
    except InvalidStatus as e:
        return {"refused": e.response.status_code}


sbx = Sandbox.create(timeout=300)
token = sbx.traffic_access_token
out["has_token"] = bool(token)
sbx.files.write("/tmp/servers.py", servers)
big = os.urandom(2_000_000)
sbx.files.write("/tmp/site/big.bin", big)
sbx.commands.run("cd /tmp/site && exec python3 -m http.server 8000 --bind 127.0.0.1",
                 background=True)
sbx.commands.run("exec python3 /tmp/servers.py ws 8765", background=True)
host = sbx.get_host(8000)
out["host"] = host
out["up"] = up(host, token)
r = get(host, "/big.bin", token)
out["big"] = {"status": r.status_code,
              "same": hashlib.sha256(r.content).digest() == hashlib.sha256(big).digest()}
out["no_token"] = get(host, "/big.bin").status_code
out["wrong_token"] = get(host, "/big.bin", "x" * len(token)).status_code
hello = get(sbx.get_host(8765), "/hello", token)
out["seen_inside"] = hello.text
closed = get(sbx.get_host(9), "/", token)
out["closed_port"] = {"status": closed.status_code, "message": closed.json().get("message", "")}
out["ws"] = websocket(sbx.get_host(8765), {TOKEN: token})
out["ws_no_token"] = websocket(sbx.get_host(8765), {})

public = Sandbox.create(timeout=300, network={"allow_public_traffic": True})
public.commands.run("cd /tmp && exec python3 -m http.server 8001 --bind 127.0.0.1",
                    background=True)
out["public_up_without_token"] = up(public.get_host(8001))
# One sandbox's token opens no other sandbox.
out["other_sandboxes_token"] = get(host, "/", public.traffic_access_token).status_code

sbx.kill()
public.kill()
out["after_kill"] = get(host, "/", token).status_code
print(json.dumps(out))
