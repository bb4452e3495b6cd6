"""The E2B SDKs' public calls against `dockhand serve`, sync and async.

Run by cli/tests/serve.rs with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY
pointing at the server, and OTHER_KEY set to a second tenant's key. Prints one
JSON object of what it saw; any failed check raises, naming the check.
"""

import asyncio
import base64
import json
import os
import sys
import threading
import time
import uuid

import httpx
from e2b import (
    AuthenticationException,
    CommandExitException,
    NotFoundException,
    PtySize,
    Sandbox as BaseSandbox,
    SandboxQuery,
)
from e2b.sandbox.filesystem.filesystem import WriteEntry
from e2b_code_interpreter import AsyncSandbox, Sandbox
from checks import refused

OTHER_KEY = os.environ["OTHER_KEY"]
RUN = uuid.uuid4().hex[:8]
report = {}


def check(condition, what):
    if not condition:
        raise AssertionError(what)




def interpreter():
    sbx = Sandbox.create(timeout=120, metadata={"suite": "serve", "run": RUN})
    report["sandbox_id"] = sbx.sandbox_id
    chart_code = (
        "import matplotlib.pyplot as plt\n"
        "plt.plot([1, 2, 3], [4, 5, 6], label='rising')\n"
        "plt.title('Growth')\n"
        "plt.show()\n"
    )
    ex = sbx.run_code(chart_code)
    with_png = [r for r in ex.results if r.png]
    check(with_png, "the chart comes back as a PNG result")
    png = base64.b64decode(with_png[0].png)
    check(png[:8] == b"\x89PNG\r\n\x1a\n", "the PNG decodes")
    chart = with_png[0].chart
    check(chart is not None, "the chart comes with its data")
    report["chart"] = {"type": str(chart.type.value), "title": chart.title,
                       "points": [list(p) for p in chart.elements[0].points]}

    ex = sbx.run_code("import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
    check(ex.results and ex.results[0].data is not None, "a DataFrame comes back as data")
    report["dataframe"] = ex.results[0].data

    ex = sbx.run_code("1 / 0")
    check(ex.error is not None, "an error is reported")
    report["error_name"] = ex.error.name

    seen = []
    sbx.run_code("x = 41\nprint('set')", on_stdout=lambda m: seen.append(m.line))
    report["streamed_stdout"] = seen
    report["state"] = sbx.run_code("x + 1").text

    ctx = sbx.create_code_context()
    sbx.run_code("x = 'other'", context=ctx)
    report["context_value"] = sbx.run_code("x", context=ctx).text
    report["default_after_context"] = sbx.run_code("x + 1").text
    report["contexts_listed"] = any(c.id == ctx.id for c in sbx.list_code_contexts())
    sbx.restart_code_context(ctx)
    ex = sbx.run_code("x", context=ctx)
    report["after_restart"] = ex.error.name if ex.error else None
    sbx.remove_code_context(ctx)
    report["context_removed"] = not any(c.id == ctx.id for c in sbx.list_code_contexts())
    return sbx


def files(sbx):
    info = sbx.files.write("notes/a.txt", "hello")
    report["written_path"] = info.path
    report["text"] = sbx.files.read("notes/a.txt")
    data = bytes(range(256)) * 4
    sbx.files.write("/tmp/b.bin", data)
    report["bytes_round_trip"] = bytes(sbx.files.read("/tmp/b.bin", format="bytes")) == data
    sbx.files.write_files([WriteEntry(path="many/1.txt", data="one"),
                           WriteEntry(path="many/2.txt", data=b"two")])
    report["listed"] = sorted(e.name for e in sbx.files.list("many"))
    report["exists"] = [sbx.files.exists("many/1.txt"), sbx.files.exists("many/none")]
    report["make_dir"] = [sbx.files.make_dir("made/deep"), sbx.files.make_dir("made/deep")]
    sbx.files.rename("many/1.txt", "many/3.txt")
    report["renamed_size"] = sbx.files.get_info("many/3.txt").size
    sbx.files.remove("many/3.txt")
    report["removed"] = not sbx.files.exists("many/3.txt")
    report["missing_read"] = refused(lambda: sbx.files.read("nothing/here.txt"))

    sbx.files.make_dir("watched")
    watcher = sbx.files.watch_dir("watched", recursive=True)
    sbx.files.write("watched/new.txt", "1")
    sbx.commands.run("mkdir -p /home/user/watched/sub && echo 2 > /home/user/watched/sub/deep.txt")
    time.sleep(1)
    sbx.files.remove("watched/new.txt")
    time.sleep(1)
    events = watcher.get_new_events()
    watcher.stop()
    report["watch_events"] = sorted({f"{e.name} {e.type.name}" for e in events})


def traversal(sbx):
    """Reads and writes that try to leave the sandbox's files."""
    sbx.commands.run("ln -sfn /etc /home/user/etc-link && ln -sfn / /tmp/root-link")
    attempts = {
        "dotdot_read": lambda: sbx.files.read("../../etc/passwd"),
        "absolute_read": lambda: sbx.files.read("/etc/passwd"),
        "proc_read": lambda: sbx.files.read("/proc/1/environ"),
        "symlink_read": lambda: sbx.files.read("etc-link/passwd"),
        "symlink_root_read": lambda: sbx.files.read("/tmp/root-link/etc/hostname"),
        "dotdot_write": lambda: sbx.files.write("../../etc/evil", "x"),
        "symlink_write": lambda: sbx.files.write("etc-link/evil", "x"),
        "absolute_list": lambda: sbx.files.list("/"),
        "rename_out": lambda: sbx.files.rename("notes/a.txt", "/etc/moved"),
    }
    report["traversal"] = {name: refused(call) for name, call in attempts.items()}
    report["etc_untouched"] = sbx.commands.run(
        "ls /etc/evil /etc/moved 2>/dev/null | wc -l").stdout.strip()


def commands(sbx):
    out = []
    r = sbx.commands.run("echo hi; echo err >&2", on_stdout=lambda s: out.append(s))
    report["run"] = {"stdout": r.stdout, "stderr": r.stderr, "exit_code": r.exit_code,
                     "streamed": "".join(out)}
    try:
        sbx.commands.run("exit 3")
        report["exit_3"] = None
    except CommandExitException as e:
        report["exit_3"] = e.exit_code
    report["cwd"] = sbx.commands.run("pwd").stdout.strip()

    handle = sbx.commands.run("sleep 600", background=True)
    report["background_listed"] = handle.pid in [p.pid for p in sbx.commands.list()]
    report["killed"] = handle.kill()
    try:
        handle.wait()
        report["killed_wait"] = "returned"
    except CommandExitException as e:
        report["killed_wait"] = e.exit_code
    report["killed_gone"] = handle.pid not in [p.pid for p in sbx.commands.list()]

    handle = sbx.commands.run("cat", background=True, stdin=True)
    sbx.commands.send_stdin(handle.pid, "piped\n")
    sbx.commands.close_stdin(handle.pid)
    report["stdin_echo"] = handle.wait().stdout

    term = sbx.pty.create(PtySize(rows=24, cols=80))
    sbx.pty.resize(term.pid, PtySize(rows=30, cols=100))
    sbx.pty.send_stdin(term.pid, b"stty size; tty; [ -t 0 ] && echo on-a-terminal; exit 7\n")
    screen = []
    try:
        term.wait(on_pty=lambda data: screen.append(bytes(data)))
        report["pty_exit"] = 0
    except CommandExitException as e:
        report["pty_exit"] = e.exit_code
    text = b"".join(screen).decode(errors="replace")
    report["pty"] = {"size": "30 100" in text, "tty": "/dev/pts/" in text,
                     "terminal": "on-a-terminal" in text,
                     "job_control_warning": "no job control" in text}

    handle = sbx.commands.run("echo started; sleep 2; echo later", background=True)
    time.sleep(0.5)
    again = sbx.commands.connect(handle.pid)
    report["reconnected"] = again.wait().stdout


def hostile():
    """Code that floods its output, forks without end and has its sandbox
    killed under it: each gets a clear outcome, and the next sandbox works."""
    sbx = BaseSandbox.create(template="base", timeout=120)
    flood = sbx.commands.run("yes flood", background=True)
    flood.disconnect()  # nobody reads it any more
    time.sleep(1)
    report["flood_killed"] = sbx.commands.kill(flood.pid)
    try:
        sbx.commands.run(":(){ :|:& };:", timeout=5)
        report["fork_bomb"] = "returned"
    except Exception as e:  # noqa: BLE001 - which exception is what we report
        report["fork_bomb"] = type(e).__name__
    report["after_bomb"] = sbx.commands.run("echo alive", timeout=30).stdout
    killer = threading.Timer(1.0, sbx.kill)
    killer.start()
    report["killed_mid_command"] = refused(lambda: sbx.commands.run("sleep 30", timeout=60))
    killer.join()
    fresh = BaseSandbox.create(template="base", timeout=60)
    report["next_sandbox"] = fresh.commands.run("echo fine").stdout
    fresh.kill()


def lifetime():
    sbx = BaseSandbox.create(template="base", timeout=60, envs={"GREETING": "hey"})
    report["envs"] = sbx.commands.run("echo $GREETING").stdout
    sbx.set_timeout(3)
    info = sbx.get_info()
    report["timeout_set"] = round((info.end_at - info.started_at).total_seconds())
    time.sleep(6)
    report["alive_after_timeout"] = sbx.is_running()
    report["info_after_timeout"] = refused(lambda: BaseSandbox.get_info(sbx.sandbox_id))
    report["command_after_timeout"] = refused(lambda: sbx.commands.run("true"))


def shapes():
    """E2B's error shapes and codes, read off the wire."""
    api, key = os.environ["E2B_API_URL"], os.environ["E2B_API_KEY"]
    out = {}
    r = httpx.post(api + "/sandboxes", json={"templateID": "nope"}, headers={"X-API-KEY": key})
    out["bad_template"] = [r.status_code, r.json()["code"], "nope" in r.json()["message"]]
    r = httpx.get(api + "/sandboxes/isnotthere", headers={"X-API-KEY": key})
    out["unknown"] = [r.status_code, r.json()["code"]]
    r = httpx.get(api + "/sandboxes")
    out["no_key"] = [r.status_code, r.json()["code"]]
    sbx = BaseSandbox.create(template="base", timeout=60)
    big = b"x" * (9 << 20)
    out["oversized_sdk"] = refused(lambda: sbx.files.write("big.bin", big))
    r = httpx.post(os.environ["E2B_SANDBOX_URL"] + "/files", params={"path": "big.bin"}, content=big,
                   headers={"E2b-Sandbox-Id": sbx.sandbox_id, "X-Access-Token": sbx._envd_access_token,
                            "Content-Type": "application/octet-stream"})
    out["oversized"] = r.status_code
    out["nothing_written"] = not sbx.files.exists("big.bin")
    # Memory asked of a daemon that cannot save it: 501, saying what is missing.
    r = httpx.post(api + f"/sandboxes/{sbx.sandbox_id}/pause", json={"memory": True},
                   headers={"X-API-KEY": key})
    out["pause"] = [r.status_code, "gVisor" in r.json()["message"], sbx.is_running()]
    sbx.kill()
    report["shapes"] = out


def h2c():
    """envd's Connect calls over HTTP/2 without TLS (prior knowledge), as an
    HTTP/2 client such as the JS SDK's makes them."""
    sbx = BaseSandbox.create(template="base", timeout=60)
    url = os.environ["E2B_SANDBOX_URL"]
    headers = {"E2b-Sandbox-Id": sbx.sandbox_id, "X-Access-Token": sbx._envd_access_token}
    with httpx.Client(http1=False, http2=True) as client:
        listed = client.post(url + "/process.Process/List", content=b"{}",
                             headers={**headers, "Content-Type": "application/json"})
        body = json.dumps({"process": {"cmd": "/bin/sh", "args": ["-c", "echo over-h2"]}}).encode()
        started = client.post(url + "/process.Process/Start",
                              content=bytes([0]) + len(body).to_bytes(4, "big") + body,
                              headers={**headers, "Content-Type": "application/connect+json"})
    messages, raw = [], started.content
    while raw:
        flags, size = raw[0], int.from_bytes(raw[1:5], "big")
        messages.append((flags, json.loads(raw[5:5 + size])))
        raw = raw[5 + size:]
    stdout = b"".join(base64.b64decode(m["event"]["data"]["stdout"])
                      for f, m in messages if f == 0 and "data" in m.get("event", {}))
    report["h2c"] = {"version": listed.http_version, "list_status": listed.status_code,
                     "stdout": stdout.decode(), "ended": messages[-1] == (2, {})}
    sbx.kill()


def network():
    """Offline by default; an allow-list lets listed names resolve (through
    dockhand's egress gateway) and nothing else."""
    probe = ("python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), 2)\" "
             "2>/dev/null && echo reached || echo refused")
    off = BaseSandbox.create(template="base", timeout=60)
    report["offline"] = off.commands.run(probe).stdout.strip()
    off.kill()
    fenced = BaseSandbox.create(template="base", timeout=60,
                                network={"allow_out": ["pypi.org"], "deny_out": ["0.0.0.0/0"]},
                                # The first on a machine builds the egress gateway.
                                request_timeout=1800)
    look = "getent hosts {} >/dev/null && echo resolves || echo unknown"
    report["fenced"] = {
        "listed": fenced.commands.run(look.format("pypi.org")).stdout.strip(),
        "unlisted": fenced.commands.run(look.format("example.com")).stdout.strip(),
        "direct": fenced.commands.run(probe).stdout.strip(),
    }
    fenced.kill()
    report["bad_network"] = refused(lambda: BaseSandbox.create(
        template="base", network={"allow_out": ["not a host!"]}))


def tenants():
    mine = BaseSandbox.create(template="base", timeout=60)
    other = {"api_key": OTHER_KEY}
    report["other_connect"] = refused(lambda: BaseSandbox.connect(mine.sandbox_id, **other))
    report["other_info"] = refused(lambda: BaseSandbox.get_info(mine.sandbox_id, **other))
    report["other_kill"] = BaseSandbox.kill(mine.sandbox_id, **other)
    listed = BaseSandbox.list(**other).next_items()
    report["other_lists"] = [s.sandbox_id for s in listed]
    # The in-sandbox API with the id but another sandbox's token.
    theirs = BaseSandbox.create(template="base", timeout=60, **other)
    url = os.environ["E2B_SANDBOX_URL"]
    forged = httpx.post(
        url + "/process.Process/List", content=b"{}",
        headers={"Content-Type": "application/json", "E2b-Sandbox-Id": mine.sandbox_id,
                 "X-Access-Token": theirs._envd_access_token},
    )
    bare = httpx.post(url + "/process.Process/List", content=b"{}",
                      headers={"Content-Type": "application/json", "E2b-Sandbox-Id": mine.sandbox_id})
    interp = httpx.post(url + "/execute", json={"code": "1"},
                        headers={"E2b-Sandbox-Id": mine.sandbox_id, "X-Access-Token": "0" * 32})
    report["forged_status"] = [forged.status_code, bare.status_code, interp.status_code]
    report["still_running"] = mine.is_running()
    theirs.kill()
    mine.kill()
    report["wrong_key"] = refused(lambda: BaseSandbox.create(template="base", api_key="not-a-key-of-this-server"))
    report["bad_template"] = refused(lambda: BaseSandbox.create(template="no-such-template"))


async def async_calls():
    sbx = await AsyncSandbox.create(timeout=60)
    ex = await sbx.run_code("print('a'); 2 + 3")
    out = {"text": ex.text, "stdout": ex.logs.stdout}
    r = await sbx.commands.run("echo async")
    out["command"] = r.stdout
    await sbx.files.write("async.txt", "written")
    out["file"] = await sbx.files.read("async.txt")
    seen = []
    await sbx.files.make_dir("w")
    watch = await sbx.files.watch_dir("w", on_event=lambda e: seen.append(f"{e.name} {e.type.name}"))
    await sbx.files.write("w/x.txt", "x")
    await asyncio.sleep(1.5)
    await watch.stop()
    out["watch_events"] = seen
    handle = await sbx.commands.run("sleep 600", background=True)
    out["killed"] = await handle.kill()
    await sbx.kill()
    out["running_after_kill"] = await sbx.is_running()
    report["async"] = out


def main():
    sbx = interpreter()
    files(sbx)
    traversal(sbx)
    commands(sbx)
    listed = Sandbox.list(query=SandboxQuery(metadata={"run": RUN})).next_items()
    report["listed_ids"] = [s.sandbox_id for s in listed]
    sbx.kill()
    report["running_after_kill"] = sbx.is_running()
    hostile()
    shapes()
    h2c()
    network()
    lifetime()
    tenants()
    asyncio.run(async_calls())
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    code = main()
    # The report is out. Leave without the interpreter's teardown: once, a
    # native library under the SDK aborted there (after every call had
    # answered), and what this test checks is the calls.
    sys.stderr.flush()
    os._exit(code or 0)
