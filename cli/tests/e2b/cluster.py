"""The E2B SDKs against `dockhand serve --backend kubernetes`: sandboxes are
pods. What a cluster runs works as on Docker; what it cannot do (pause,
snapshots) is refused with 501, saying so, and the sandbox runs on; a volume
is a claim two sandboxes' pods mount in turn.

Run by cli/tests/serve_kubernetes.rs (against the simulated API server) and
by hand against a real cluster (docs/scale-out.md), with E2B_API_URL,
E2B_SANDBOX_URL and E2B_API_KEY set. Argument `interpreter` also runs code
through the code interpreter's template. Prints one JSON object.
"""

import json
import os
import sys
import time

import httpx
from e2b import Sandbox as BaseSandbox
from e2b_code_interpreter import Sandbox

report = {}
api = os.environ["E2B_API_URL"]
key = {"X-API-KEY": os.environ["E2B_API_KEY"]}


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def session():
    sbx = BaseSandbox.create(template="base", timeout=120)
    report["listed"] = sbx.sandbox_id in [s.sandbox_id for s in BaseSandbox.list().next_items()]
    run = sbx.commands.run("echo hi from $(hostname) && echo err >&2 && python3 -c 'print(6*7)'")
    report["stdout_lines"] = run.stdout.splitlines()[1:]
    report["stderr"] = run.stderr
    report["hostname_is_pod"] = run.stdout.split()[2].startswith("dockhand-")
    try:
        sbx.commands.run("exit 3")
        report["exit_3"] = None
    except Exception as e:  # CommandExitException
        report["exit_3"] = getattr(e, "exit_code", str(e))
    sbx.files.write("notes/a.txt", "hello pod")
    report["read"] = sbx.files.read("notes/a.txt")
    report["ls"] = sorted(e.name for e in sbx.files.list("notes"))
    streamed = []
    sbx.commands.run("for i in 1 2 3; do echo $i; done", on_stdout=streamed.append)
    report["streamed"] = "".join(streamed).split()

    # A port inside the pod, through the server as `get_host(port)` names it.
    sbx.files.write("/tmp/site/index.html", "served from the pod")
    sbx.commands.run("cd /tmp/site && exec python3 -m http.server 8000 --bind 127.0.0.1",
                     background=True)
    served = None
    for _ in range(100):
        r = httpx.get(api + "/", headers={"Host": sbx.get_host(8000),
                                          "e2b-traffic-access-token": sbx.traffic_access_token})
        if r.status_code == 200:
            served = r.text
            break
        time.sleep(0.2)
    report["port"] = served

    # What a cluster cannot do: refused with 501 and why, the sandbox runs on.
    r = httpx.post(api + f"/sandboxes/{sbx.sandbox_id}/pause", headers=key)
    if r.status_code == 204:
        # A server with --kube-pausable: paused on its claim; back by connect.
        report["pause"] = [204, True]
        BaseSandbox.connect(sbx.sandbox_id)
    else:
        report["pause"] = [r.status_code, "kubernetes" in r.json()["message"]]
    report["running_after_pause"] = sbx.is_running()
    r = httpx.post(api + f"/sandboxes/{sbx.sandbox_id}/snapshots", headers=key, json={})
    if r.status_code == 201:
        # A server with --kube-pausable: a copy of the sandbox's claim.
        report["snapshot"] = [201, True]
        httpx.delete(api + f"/templates/{r.json()['snapshotID']}", headers=key)
    else:
        report["snapshot"] = [r.status_code, "kubernetes" in r.json()["message"]]
    report["after_refusals"] = sbx.commands.run("cat notes/a.txt").stdout
    sbx.kill()

    # A volume is a claim: mounted by one sandbox's pod, then another's,
    # its files read through the content API, not destroyed while mounted.
    from e2b import Volume
    vol = Volume.create("pod-data")
    writer = BaseSandbox.create(timeout=60, volume_mounts={"/mnt/data": vol})
    writer.commands.run("echo from a pod > /mnt/data/h.txt")
    writer.kill()
    reader = BaseSandbox.create(timeout=60, volume_mounts={"/mnt/data": "pod-data"})
    report["volume_read_back"] = reader.commands.run("cat /mnt/data/h.txt").stdout
    # A sandbox writes it (E2B's mounts are read-write), and a
    # ReadWriteOnce claim takes one writer: the content API says so.
    try:
        vol.read_file("h.txt")
        report["volume_content_while_written"] = "read"
    except Exception as e:
        report["volume_content_while_written"] = str(e)[:3]
    try:
        Volume.destroy(vol.volume_id)
        report["volume_destroy_mounted"] = "destroyed"
    except Exception as e:
        report["volume_destroy_mounted"] = type(e).__name__
    reader.kill()
    report["volume_content"] = vol.read_file("h.txt")
    for _ in range(50):
        try:
            report["volume_destroyed"] = Volume.destroy(vol.volume_id)
            break
        except Exception as e:  # the content API's helper still mounts it
            report["volume_destroyed"] = str(e)
            time.sleep(0.2)
    report["killed"] = sbx.sandbox_id not in [s.sandbox_id for s in BaseSandbox.list().next_items()]


def wait_state(sandbox_id, state, limit=60):
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if BaseSandbox.get_info(sandbox_id).state == state:
            return True
        time.sleep(0.25)
    return False


def pause():
    """With `serve --kube-pausable`: a sandbox's files on a claim of its
    own, its pod deleted at a pause and made again at connect; the
    lifecycle's pause at the timeout and the call that resumes it."""
    out = {}
    sbx = BaseSandbox.create(timeout=120)
    sbx.files.write("notes/a.txt", "kept in a claim")
    out["paused"] = sbx.pause()
    out["state_after_pause"] = BaseSandbox.get_info(sbx.sandbox_id).state
    out["paused_again"] = sbx.pause()
    started = time.monotonic()
    again = BaseSandbox.connect(sbx.sandbox_id, timeout=120)
    out["resume_seconds"] = time.monotonic() - started
    out["state_after_connect"] = BaseSandbox.get_info(sbx.sandbox_id).state
    out["file_after"] = again.files.read("notes/a.txt")
    out["command_after"] = again.commands.run("cat notes/a.txt").stdout
    again.kill()
    auto = BaseSandbox.create(
        timeout=3, lifecycle={"on_timeout": "pause", "auto_resume": True}
    )
    auto.files.write("kept.txt", "auto")
    out["paused_at_timeout"] = wait_state(auto.sandbox_id, "paused")
    out["auto_resumed_read"] = auto.files.read("kept.txt")
    out["running_after_call"] = BaseSandbox.get_info(auto.sandbox_id).state
    auto.kill()
    # A snapshot: a copy of the sandbox's claim, which new sandboxes start
    # on copies of; it outlives its sandbox until deleted.
    src = BaseSandbox.create(timeout=120)
    src.files.write("snap.txt", "from the snapshot")
    info = src.create_snapshot()
    src.files.write("snap.txt", "changed after")
    copy = BaseSandbox.create(info.snapshot_id, timeout=120)
    out["snapshot_copy"] = copy.files.read("snap.txt")
    copy.files.write("snap.txt", "copy's own")
    out["snapshot_source"] = src.files.read("snap.txt")
    src.kill()
    copy.kill()
    later = BaseSandbox.create(info.snapshot_id, timeout=120)
    out["snapshot_after_source_killed"] = later.files.read("snap.txt")
    later.kill()
    out["snapshot_deleted"] = BaseSandbox.delete_snapshot(info.snapshot_id)
    report["pause"] = out


def interpreter():
    sbx = Sandbox.create(timeout=120)
    ex = sbx.run_code("x = 20\nx + 22")
    report["run_code"] = ex.text
    ex = sbx.run_code("print('printed'); 1/0")
    report["printed"] = ex.logs.stdout
    report["error"] = ex.error.name if ex.error else None
    sbx.kill()


if "pause" in sys.argv[1:]:
    pause()
else:
    session()
if "interpreter" in sys.argv[1:]:
    interpreter()
print(json.dumps(report))
