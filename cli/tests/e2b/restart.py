"""Sandboxes across a restart of `dockhand serve --state-dir`, through the
E2B SDKs. `before` makes them and prints their ids; `after IDS_JSON` (run
against the restarted server) finds them again and prints what it saw.
Environment as for sdk_calls.py (OTHER_KEY a second tenant's key)."""

import json
import os
import sys

from e2b import Sandbox as BaseSandbox, SandboxQuery, SandboxState
from e2b_code_interpreter import Sandbox
from checks import refused

OTHER_KEY = os.environ["OTHER_KEY"]




def before():
    running = BaseSandbox.create(template="base", timeout=600, metadata={"role": "running"})
    running.files.write("work.txt", "before the restart")
    sleeper = running.commands.run("sleep 600", background=True).pid
    paused = BaseSandbox.create(template="base", timeout=600, metadata={"role": "paused"})
    paused.files.write("work.txt", "paused before")
    paused.pause()
    kernel = Sandbox.create(timeout=600)
    kernel.run_code("x = 1\nopen('k.txt', 'w').write('kernel file')")
    other = BaseSandbox.create(template="base", timeout=600, api_key=OTHER_KEY)
    print(json.dumps({"ids": {"running": running.sandbox_id, "paused": paused.sandbox_id,
                              "kernel": kernel.sandbox_id, "other": other.sandbox_id},
                      "sleeper": sleeper}))


def after(made):
    ids, sleeper = made["ids"], made["sleeper"]
    out = {}
    listed = {s.sandbox_id: s.state for s in BaseSandbox.list(
        query=SandboxQuery(state=[SandboxState.RUNNING, SandboxState.PAUSED])).next_items()}
    out["listed"] = {name: listed.get(sid) for name, sid in ids.items()}
    running = BaseSandbox.connect(ids["running"])
    out["running_file"] = running.files.read("work.txt")
    out["running_command"] = running.commands.run("echo alive").stdout
    # A process started before the restart runs on (the container was kept
    # running, and this server attached to it again).
    out["sleeper_alive"] = running.commands.run(f"kill -0 {sleeper} && echo yes").stdout
    paused = BaseSandbox.connect(ids["paused"])
    out["paused_file"] = paused.files.read("work.txt")
    kernel = Sandbox.connect(ids["kernel"])
    run = kernel.run_code("print(open('k.txt').read())\n2 + 2")
    out["kernel"] = [run.logs.stdout, run.text]
    # The kernel itself ran on: a variable set before the restart is there.
    out["kernel_variable"] = kernel.run_code("x + 41").text
    out["other_hidden"] = refused(lambda: BaseSandbox.connect(ids["other"]))
    out["other_own"] = BaseSandbox.connect(ids["other"], api_key=OTHER_KEY).commands.run("echo mine").stdout
    for name, sid in ids.items():
        key = OTHER_KEY if name == "other" else os.environ["E2B_API_KEY"]
        BaseSandbox.kill(sid, api_key=key)
    print(json.dumps(out))


if sys.argv[1] == "before":
    before()
else:
    after(json.loads(sys.argv[2]))
