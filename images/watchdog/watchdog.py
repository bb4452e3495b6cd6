"""dockhand's watchdog: removes one process's containers and volumes when
that process goes.

Runs in a container of its own, one per owning process, with the daemon's
socket mounted and nothing else reachable. Its stdin is the owner's attach
connection: the kernel closes that connection when the owner exits or is
killed, the daemon then closes this program's stdin, and it removes every
object labelled with the owner's session id. No untrusted code ever runs in
this container.
"""

import http.client
import json
import os
import socket
import sys
import time
import urllib.parse

SOCKET = "/run/dockhand/docker.sock"
SESSION = os.environ["DOCKHAND_OWNER_SESSION"]
LABEL = "dev.dockhand.session=" + SESSION


class UnixConnection(http.client.HTTPConnection):
    def __init__(self):
        super().__init__("docker", timeout=60)

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(SOCKET)


def call(method, path):
    conn = UnixConnection()
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def listed(path):
    query = urllib.parse.quote(json.dumps({"label": [LABEL]}))
    status, body = call("GET", f"{path}filters={query}")
    if status != 200:
        return []
    return json.loads(body)


def sweep():
    for container in listed("/containers/json?all=1&"):
        if container.get("Labels", {}).get("dev.dockhand.kind") == "watchdog":
            continue
        try:
            call("DELETE", f"/containers/{container['Id']}?force=1&v=1")
        except OSError:
            pass
    volumes = listed("/volumes?") or {}
    for volume in volumes.get("Volumes") or []:
        try:
            call("DELETE", "/volumes/" + urllib.parse.quote(volume["Name"]))
        except OSError:
            pass


def main():
    # The owner waits for this line: the socket answers and stdin is watched.
    status, _ = call("GET", "/_ping")
    if status != 200:
        sys.stderr.write(f"the daemon's socket answered {status}\n")
        return 1
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    while sys.stdin.buffer.read(65536):
        pass
    # A create the owner sent just before it died may land after the first
    # sweep, so look again once the daemon has had time to finish it.
    for pause in (0, 1, 3):
        time.sleep(pause)
        try:
            sweep()
        except (OSError, ValueError) as e:
            sys.stderr.write(f"sweep failed: {e}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
