"""Memory pauses and snapshots of `dockhand serve --gvisor` on a daemon that
saves memory (gVisor, `experimental` on), through the E2B SDKs: a kernel's
variables and a command's process survive `pause()` / `connect()`, and
`create_snapshot()` (E2B's default, `full`) starts sandboxes that go on
from the source's memory and then diverge. Prints one JSON line."""

import json
import time

from e2b import Sandbox as BaseSandbox
from e2b_code_interpreter import Sandbox

out = {}
source = Sandbox.create(timeout=600)
source.run_code("x = 41")
source.pause()
out["paused_state"] = str(Sandbox.get_info(source.sandbox_id).state.value)
source = Sandbox.connect(source.sandbox_id)
out["after_resume"] = source.run_code("x + 1").text

snapshot = source.create_snapshot()
out["source_after_snapshot"] = source.run_code("x").text
copy = Sandbox.create(snapshot.snapshot_id, timeout=300)
out["copy_memory"] = copy.run_code("x + 1").text
copy.run_code("x = 0")
out["source_unchanged"] = source.run_code("x").text
second = Sandbox.create(snapshot.snapshot_id, timeout=300)
out["second_copy"] = second.run_code("x").text
files = source.create_snapshot(mode="filesystem")
from_files = Sandbox.create(files.snapshot_id, timeout=300)
run = from_files.run_code("x")
out["files_only"] = run.error.name if run.error else run.text

plain = BaseSandbox.create("base", timeout=300)
sleeper = plain.commands.run("sleep 600", background=True).pid
plain.pause()
plain = BaseSandbox.connect(plain.sandbox_id)
out["process_after_resume"] = plain.commands.run(f"kill -0 {sleeper} && echo alive").stdout

# Paused with its memory at its timeout, resumed by the next call.
auto = Sandbox.create(timeout=4, lifecycle={"on_timeout": "pause", "auto_resume": True})
auto.run_code("y = 'kept in memory'")
started = time.monotonic()
while Sandbox.get_info(auto.sandbox_id).state.value != "paused" and time.monotonic() - started < 60:
    time.sleep(0.25)
out["auto_paused"] = Sandbox.get_info(auto.sandbox_id).state.value
out["auto_resumed"] = auto.run_code("y").text

for sandbox in (source, copy, second, from_files, plain, auto):
    sandbox.kill()
out["deleted"] = [Sandbox.delete_snapshot(s.snapshot_id) for s in (snapshot, files)]
print(json.dumps(out))
