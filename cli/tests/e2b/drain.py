"""A command stream open while the server shuts down, through the E2B SDK.
`hold` makes a sandbox, starts `sleep 120` in the foreground, says
`running <id>` and, once the server has been told to stop, prints how the
command's call ended and when. `after ID` (against the next server) runs a
command in the same sandbox."""

import json
import sys
import time

from e2b import Sandbox


def hold():
    sandbox = Sandbox.create(template="base", timeout=600)
    sandbox.files.write("kept.txt", "kept across the restart")
    print("running %s" % sandbox.sandbox_id, flush=True)
    started = time.time()
    try:
        sandbox.commands.run("sleep 120", timeout=0, request_timeout=300)
        ended = "returned"
        message = ""
    except Exception as e:  # the SDK's own exception for a cut stream
        ended = type(e).__name__
        message = str(e)[:300]
    print(json.dumps({"ended": ended, "message": message, "secs": round(time.time() - started, 2)}), flush=True)


def after(sandbox_id):
    sandbox = Sandbox.connect(sandbox_id)
    out = {
        "file": sandbox.files.read("kept.txt"),
        "echo": sandbox.commands.run("echo after").stdout,
    }
    sandbox.kill()
    print(json.dumps(out))


if __name__ == "__main__":
    if sys.argv[1] == "hold":
        hold()
    else:
        after(sys.argv[2])
