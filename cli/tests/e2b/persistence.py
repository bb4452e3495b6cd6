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
from checks import refused

OTHER_KEY = os.environ["OTHER_KEY"]
report = {}




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


def snapshots():
    """create_snapshot(), then sandboxes from it: its files as they were,
    for its key only, until delete_snapshot()."""
    out = {}
    src = BaseSandbox.create(template="base", timeout=120)
    src.files.write("snap.txt", "from the snapshot")
    info = src.create_snapshot()
    out["source_runs_on"] = src.commands.run("echo on").stdout
    src.files.write("snap.txt", "changed after")
    copy = BaseSandbox.create(info.snapshot_id, timeout=60)
    out["copy_file"] = copy.files.read("snap.txt")
    copy.files.write("snap.txt", "copy's own")
    out["source_file"] = src.files.read("snap.txt")
    out["listed"] = info.snapshot_id in [s.snapshot_id for s in src.list_snapshots().next_items()]
    out["other_cannot_use"] = refused(lambda: BaseSandbox.create(info.snapshot_id, api_key=OTHER_KEY))
    named = src.create_snapshot(name="my-snap")
    out["named"] = named.names
    out["by_name"] = BaseSandbox.create("my-snap", timeout=60).files.read("snap.txt")
    out["name_taken"] = refused(lambda: src.create_snapshot(name="my-snap"))
    src.kill()
    copy.kill()
    # A snapshot outlives its sandbox.
    out["after_source_killed"] = BaseSandbox.create(info.snapshot_id, timeout=60).files.read("snap.txt")
    out["deleted"] = BaseSandbox.delete_snapshot(info.snapshot_id)
    out["deleted_again"] = BaseSandbox.delete_snapshot(info.snapshot_id)
    out["create_after_delete"] = refused(lambda: BaseSandbox.create(info.snapshot_id))
    BaseSandbox.delete_snapshot(named.snapshot_id)
    # The code interpreter's: a kernel sandbox again, with the files.
    kernel = Sandbox.create(timeout=120)
    kernel.run_code("open('data.csv', 'w').write('a,b\\n1,2\\n')")
    kinfo = kernel.create_snapshot()
    again = Sandbox.create(kinfo.snapshot_id, timeout=120)
    run = again.run_code("import pandas as pd; int(pd.read_csv('data.csv')['b'][0])")
    out["kernel_copy"] = run.text if run.error is None else f"{run.error.name}: {run.error.value}"
    kernel.kill()
    again.kill()
    BaseSandbox.delete_snapshot(kinfo.snapshot_id)
    report["snapshots"] = out


def volumes():
    """e2b.Volume: made, mounted in one sandbox then another, its key's
    only, not destroyed while mounted."""
    from e2b import Volume

    out = {}
    vol = Volume.create("shared-data")
    out["created_name"] = vol.name
    writer = BaseSandbox.create(template="base", timeout=60, volume_mounts={"/mnt/data": vol})
    writer.commands.run("echo hello > /mnt/data/h.txt")
    writer.kill()
    reader = BaseSandbox.create(template="base", timeout=60, volume_mounts={"/mnt/data": "shared-data"})
    out["read_back"] = reader.commands.run("cat /mnt/data/h.txt").stdout
    out["listed"] = "shared-data" in [v.name for v in Volume.list()]
    out["info_name"] = Volume.get_info(vol.volume_id).name
    out["other_sees"] = "shared-data" in [v.name for v in Volume.list(api_key=OTHER_KEY)]
    out["other_mount"] = refused(lambda: BaseSandbox.create(
        template="base", timeout=30, volume_mounts={"/mnt/x": "shared-data"}, api_key=OTHER_KEY))
    out["other_destroy"] = Volume.destroy(vol.volume_id, api_key=OTHER_KEY)
    # The content API: the volume's files without a sandbox, seen by the
    # sandbox that mounts it.
    out["content_read"] = vol.read_file("h.txt")
    vol.make_dir("docs/deep", force=True)
    out["content_written"] = vol.write_file("docs/deep/note.txt", "from the API").size
    out["content_overwrite"] = refused(lambda: vol.write_file("docs/deep/note.txt", "again"))
    vol.write_file("docs/deep/note.txt", "again", force=True)
    out["seen_in_sandbox"] = reader.commands.run("cat /mnt/data/docs/deep/note.txt").stdout
    out["listing"] = sorted(e.path for e in vol.list("/", depth=3))
    out["exists"] = [vol.exists("h.txt"), vol.exists("nope.txt")]
    out["mode"] = oct(vol.update_metadata("h.txt", mode=0o600).mode)
    out["info_type"] = str(vol.get_info("docs").type.value)
    vol.remove("docs/deep/note.txt")
    out["removed"] = vol.exists("docs/deep/note.txt")
    out["missing_read"] = refused(lambda: vol.read_file("nope.txt"))
    out["climb"] = refused(lambda: vol.read_file("../../etc/passwd"))
    out["foreign_owner"] = refused(lambda: vol.write_file("x.txt", "x", uid=0))
    out["forged_token"] = refused(lambda: vol.read_file("h.txt", token="0" * 64))
    theirs = Volume.create("their-data", api_key=OTHER_KEY)
    out["their_token"] = refused(lambda: vol.read_file("h.txt", token=theirs.token))
    Volume.destroy(theirs.volume_id, api_key=OTHER_KEY)
    out["made_twice"] = refused(lambda: Volume.create("shared-data"))
    out["destroy_mounted"] = refused(lambda: Volume.destroy(vol.volume_id))
    reader.kill()
    out["destroyed"] = Volume.destroy(vol.volume_id)
    out["gone"] = refused(lambda: Volume.get_info(vol.volume_id))
    report["volumes"] = out


for step in (pause_and_connect, lifecycle, interpreter, snapshots, volumes):
    step()
print(json.dumps(report))
