"""Pause, connect (resume) and lifecycle through the E2B SDKs against
`dockhand serve`, on a daemon without checkpoints (so a pause keeps files:
what the server reports and the SDK sees must say so).

Run by cli/tests/serve_persistence.rs with E2B_API_URL, E2B_SANDBOX_URL and
E2B_API_KEY set, and OTHER_KEY a second tenant's key. Prints one JSON object
of what it saw; a failed check raises, naming it.
"""

import json
import os
import time

from e2b import Sandbox as BaseSandbox, SandboxQuery, SandboxState
from e2b_code_interpreter import Sandbox

OTHER_KEY = os.environ["OTHER_KEY"]
report = {}


def refused(call):
    """The exception a call raises (its class name), or None if it worked."""
    try:
        call()
    except Exception as e:  # noqa: BLE001 - the class is what is reported
        return type(e).__name__
    return None


def wait_state(sandbox_id, state, limit=30):
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if BaseSandbox.get_info(sandbox_id).state == state:
            return True
        time.sleep(0.25)
    return False


def pause_and_connect():
    sbx = BaseSandbox.create(template="base", timeout=120)
    sbx.files.write("notes/a.txt", "kept")
    sbx.commands.run("echo from-shell > /tmp/t.txt")
    out = {"paused": sbx.pause()}
    out["state_after_pause"] = BaseSandbox.get_info(sbx.sandbox_id).state
    out["listed_paused"] = sbx.sandbox_id in [
        s.sandbox_id for s in BaseSandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()
    ]
    out["listed_running"] = sbx.sandbox_id in [
        s.sandbox_id for s in BaseSandbox.list(query=SandboxQuery(state=[SandboxState.RUNNING])).next_items()
    ]
    # Paused twice: the SDK's False (409).
    out["paused_again"] = sbx.pause()
    # No auto-resume asked: a call into it is refused until connect.
    out["call_while_paused"] = refused(lambda: sbx.files.read("notes/a.txt"))
    # Another key cannot see, resume or pause it.
    out["other_connect"] = refused(lambda: BaseSandbox.connect(sbx.sandbox_id, api_key=OTHER_KEY))
    out["other_pause"] = refused(lambda: BaseSandbox.pause(sbx.sandbox_id, api_key=OTHER_KEY))
    started = time.monotonic()
    again = BaseSandbox.connect(sbx.sandbox_id, timeout=120)
    out["resume_seconds"] = time.monotonic() - started
    out["state_after_connect"] = BaseSandbox.get_info(sbx.sandbox_id).state
    out["file_after"] = again.files.read("notes/a.txt")
    out["tmp_after"] = again.commands.run("cat /tmp/t.txt").stdout
    # Connecting to a running one: as it is.
    out["connect_running"] = BaseSandbox.connect(sbx.sandbox_id).files.read("notes/a.txt")
    # beta_pause, then the older resume call through connect.
    out["beta_paused"] = again.beta_pause()
    out["connected_again"] = again.connect().commands.run("echo up").stdout
    again.kill()
    out["killed_paused_gone"] = refused(lambda: BaseSandbox.get_info(sbx.sandbox_id))
    # A paused sandbox is killed cleanly too.
    other = BaseSandbox.create(template="base", timeout=60)
    other.pause()
    other.kill()
    out["kill_paused"] = refused(lambda: BaseSandbox.get_info(other.sandbox_id))
    report["pause"] = out


def lifecycle():
    out = {}
    # Paused at its timeout, resumed by the next call.
    sbx = BaseSandbox.create(
        template="base", timeout=3, lifecycle={"on_timeout": "pause", "auto_resume": True}
    )
    sbx.files.write("kept.txt", "auto")
    out["paused_at_timeout"] = wait_state(sbx.sandbox_id, "paused")
    out["auto_resumed_read"] = sbx.files.read("kept.txt")
    out["running_after_call"] = BaseSandbox.get_info(sbx.sandbox_id).state
    sbx.kill()
    # Files only, resumed by connect.
    fs = BaseSandbox.create(
        template="base", timeout=3, lifecycle={"on_timeout": {"action": "pause", "mode": "filesystem"}}
    )
    fs.files.write("kept.txt", "files")
    out["fs_paused_at_timeout"] = wait_state(fs.sandbox_id, "paused")
    out["fs_call_refused"] = refused(lambda: fs.files.read("kept.txt"))
    out["fs_connected_read"] = BaseSandbox.connect(fs.sandbox_id).files.read("kept.txt")
    fs.kill()
    # Without the lifecycle, the timeout kills.
    plain = BaseSandbox.create(template="base", timeout=2)
    time.sleep(4)
    out["killed_at_timeout"] = refused(lambda: BaseSandbox.get_info(plain.sandbox_id))
    report["lifecycle"] = out


def interpreter():
    """The code interpreter paused on files: files stay, variables go
    (memory needs gVisor with checkpoints; asked for here, it is refused)."""
    sbx = Sandbox.create(timeout=120)
    sbx.run_code("x = 41\nopen('k.txt', 'w').write('k')")
    out = {"memory_refused": refused(lambda: sbx.pause(mode="full"))}
    out["still_running"] = sbx.run_code("x + 1").text
    out["paused"] = sbx.pause()
    again = Sandbox.connect(sbx.sandbox_id)
    run = again.run_code("print(open('k.txt').read())\nx")
    out["stdout"] = run.logs.stdout
    out["error"] = run.error.name if run.error else None
    again.kill()
    report["interpreter"] = out


for step in (pause_and_connect, lifecycle, interpreter):
    step()
print(json.dumps(report))
