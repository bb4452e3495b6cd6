"""A WebSocket client (the `websockets` package) against an echo server.

ws_client.py URL [HEADER=VALUE ...] -> one JSON line: what came back, or
the HTTP status the handshake was refused with.
"""
import hashlib
import json
import os
import sys

from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

url = sys.argv[1]
headers = dict(arg.split("=", 1) for arg in sys.argv[2:])
try:
    with connect(url, additional_headers=headers, open_timeout=30, max_size=None) as ws:
        ws.send("hello over the agent")
        text = ws.recv(timeout=30)
        blob = os.urandom(300_000)
        ws.send(blob)
        back = ws.recv(timeout=30)
        ws.ping().wait(timeout=30)
        print(json.dumps({
            "text": text,
            "binary_same": back == blob,
            "binary_sha": hashlib.sha256(back).hexdigest()[:16],
        }))
except InvalidStatus as e:
    print(json.dumps({"refused": e.response.status_code}))
