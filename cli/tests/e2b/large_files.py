"""Large files through the E2B SDK: 100 MiB written and read back byte-exact
(timed), then a command; a raw client that reads the start of a download
and stops reading (while the SDK runs a command and reads a small file),
then goes away; then every call still works. Prints one JSON object."""

import hashlib
import json
import os
import socket
import time
import urllib.parse

from e2b import Sandbox

SIZE = 100 << 20
out = {}

sandbox = Sandbox.create(template="base", timeout=600)
data = os.urandom(SIZE)
digest = hashlib.sha256(data).hexdigest()

started = time.time()
sandbox.files.write("/home/user/big.bin", data)
out["write_secs"] = round(time.time() - started, 3)

started = time.time()
back = sandbox.files.read("/home/user/big.bin", format="bytes")
out["read_secs"] = round(time.time() - started, 3)
out["read_size"] = len(back)
out["read_exact"] = hashlib.sha256(bytes(back)).hexdigest() == digest
del back

out["after_read"] = sandbox.commands.run("wc -c < /home/user/big.bin").stdout.strip()

# A client that takes the first MiB of a download and stops reading.
url = urllib.parse.urlsplit(os.environ["E2B_SANDBOX_URL"])
stalled = socket.create_connection((url.hostname, url.port), timeout=60)
stalled.sendall(
    (
        "GET /files?path=%s HTTP/1.1\r\nHost: %s\r\nE2b-Sandbox-Id: %s\r\nX-Access-Token: %s\r\n\r\n"
        % (urllib.parse.quote("/home/user/big.bin"), url.netloc, sandbox.sandbox_id, sandbox._envd_access_token)
    ).encode()
)
got = b""
while len(got) < (1 << 20):
    piece = stalled.recv(65536)
    if not piece:
        break
    got += piece
out["stalled_status"] = got.split(b" ", 2)[1].decode() if got.startswith(b"HTTP/") else None
out["stalled_got_mib"] = len(got) >> 20

# Meanwhile the sandbox answers everything else.
started = time.time()
out["while_stalled"] = sandbox.commands.run("echo while-stalled").stdout.strip()
sandbox.files.write("/home/user/small.txt", "small")
out["small_read"] = sandbox.files.read("/home/user/small.txt")
time.sleep(5)
out["while_stalled_secs"] = round(time.time() - started, 3)
stalled.close()

out["after_stall"] = sandbox.commands.run("echo after").stdout.strip()
again = sandbox.files.read("/home/user/big.bin", format="bytes")
out["again_exact"] = hashlib.sha256(bytes(again)).hexdigest() == digest
sandbox.kill()
print(json.dumps(out))
