"""Template builds through the E2B SDK's `Template` API against `dockhand
serve`: `build` builds templates (packages, files, variables, a working
directory, a user, a start command), starts sandboxes from them and tries
what another key and a forged upload can do; `after ID` (against a
restarted server) starts the template again and deletes it. Prints one
JSON line. Environment as for sdk_calls.py (OTHER_KEY a second key)."""

import json
import os
import sys
import tempfile
import uuid

import httpx
from e2b import Sandbox, Template
from checks import refused

API = os.environ["E2B_API_URL"]
KEY = os.environ["E2B_API_KEY"]
OTHER_KEY = os.environ["OTHER_KEY"]


def run(sandbox, command):
    return sandbox.commands.run(command).stdout


def build():
    out = {}
    # A step of its own per run: the build runs (and logs) rather than
    # finding the image of an earlier run.
    nonce = uuid.uuid4().hex[:12]
    context = tempfile.mkdtemp()
    with open(os.path.join(context, "hello.txt"), "w") as f:
        f.write("hello from the build context")
    os.makedirs(os.path.join(context, "bin"))
    with open(os.path.join(context, "bin", "tool.sh"), "w") as f:
        f.write("#!/bin/sh\necho the tool ran\n")
    template = (
        Template(file_context_path=context)
        .from_base_image()
        .apt_install(["jq"])
        .pip_install(["iniconfig==2.0.0"])
        .copy("hello.txt", "/app/")
        .copy("bin/tool.sh", "/usr/local/bin/tool", mode=0o755)
        .set_envs({"GREETING": "hi there"})
        .set_workdir("/app")
        .run_cmd(f"cat hello.txt > /app/copied.txt && echo BUILD-MARKER-$((6 * 7))-{nonce}")
        .set_user("user")
        .run_cmd("whoami > /var/tmp/built-as")
        .set_start_cmd("echo started > /tmp/started; exec sleep 600", "[ -f /tmp/started ]")
    )
    logs = []
    info = Template.build(template, "my-tools:v1", on_build_logs=lambda e: logs.append(e.message))
    out["template_id"] = info.template_id
    out["marker_in_log"] = any(f"BUILD-MARKER-42-{nonce}" in m for m in logs)
    out["exists"] = Template.exists("my-tools")
    out["exists_for_other"] = Template.exists("my-tools", api_key=OTHER_KEY)

    sandbox = Sandbox.create("my-tools", timeout=300)
    out["jq"] = run(sandbox, "echo '{\"a\": 7}' | jq .a")
    out["pip"] = run(sandbox, "python3 -c 'import iniconfig; print(iniconfig.__name__)'")
    out["copied"] = run(sandbox, "cat /app/copied.txt")
    out["tool"] = run(sandbox, "tool")
    out["tool_mode"] = run(sandbox, "stat -c %a /usr/local/bin/tool")
    out["greeting"] = run(sandbox, "echo $GREETING")
    out["built_as"] = run(sandbox, "cat /var/tmp/built-as")
    out["started"] = run(sandbox, "cat /tmp/started")
    sandbox.kill()
    tagged = Sandbox.create("my-tools:v1", timeout=120)
    out["by_tag"] = run(tagged, "cat /app/copied.txt")
    tagged.kill()
    out["other_create"] = refused(lambda: Sandbox.create("my-tools", api_key=OTHER_KEY))

    # A template on top of the key's own.
    layered = Template().from_template("my-tools").run_cmd("echo layered > /var/tmp/layer")
    Template.build(layered, "my-tools-plus")
    plus = Sandbox.create("my-tools-plus", timeout=120)
    out["layered"] = run(plus, "cat /var/tmp/layer; jq --version | cut -c1-3")
    plus.kill()

    # A template whose image has no Python: its sandboxes need none.
    bare = Template().from_base_image().run_cmd(
        "rm -f /usr/bin/python3* /usr/local/bin/python3* && ! command -v python3", user="root")
    Template.build(bare, "no-python")
    no_python = Sandbox.create("no-python", timeout=120)
    no_python.files.write("/tmp/kept.txt", "without python")
    out["no_python"] = run(no_python, "command -v python3 || echo none; cat /tmp/kept.txt")
    no_python.kill()

    # Failures come back as the SDK's BuildException, with the reason.
    failing_logs = []
    try:
        Template.build(Template().from_base_image().run_cmd("echo FAILING-STEP; exit 3"),
                       "broken", on_build_logs=lambda e: failing_logs.append(e.message))
        out["failing"] = None
    except Exception as e:  # noqa: BLE001
        out["failing"] = [type(e).__name__, str(e)]
    out["failing_logged"] = any("FAILING-STEP" in m for m in failing_logs)
    out["missing_image"] = refused(
        lambda: Template.build(Template().from_image("no-such-registry.invalid/none:1"), "nothing"))
    out["bad_step"] = refused(
        lambda: Template.build(Template().from_base_image().set_envs({"BAD NAME": "x"}), "bad"))
    out["reserved"] = refused(lambda: Template.build(Template().from_base_image(), "base"))

    # The upload links: another key cannot ask for one, a guessed token is refused.
    files = f"{API}/templates/{info.template_id}/files/{'a' * 64}"
    out["other_link"] = httpx.get(files, headers={"X-API-Key": OTHER_KEY}).status_code
    link = httpx.get(files, headers={"X-API-Key": KEY}).json()
    out["link_present"] = link["present"]
    out["guessed_token"] = httpx.put(files + "?token=guess", content=b"x").status_code
    out["token_elsewhere"] = httpx.put(
        f"{API}/templates/{info.template_id}/files/{'b' * 64}?" + link["url"].split("?")[1],
        content=b"x").status_code
    out["good_token"] = httpx.put(link["url"], content=b"not a tar").status_code
    out["spent_token"] = httpx.put(link["url"], content=b"x").status_code
    out["other_delete"] = httpx.delete(f"{API}/templates/{info.template_id}",
                                       headers={"X-API-Key": OTHER_KEY}).status_code
    # Uploads that wait for a build are bounded per key (four of the
    # server's largest uploads; the 9 bytes above wait too): past that, no
    # byte more and then no link.
    largest = int(os.environ["MAX_UPLOAD"])
    sizes = [largest, largest, largest, largest, largest - 9]
    statuses = []
    for i, size in enumerate(sizes):
        asked = httpx.get(f"{API}/templates/{info.template_id}/files/{i + 1:064x}", headers={"X-API-Key": KEY})
        statuses.append(httpx.put(asked.json()["url"], content=b"x" * size).status_code)
    after = httpx.get(f"{API}/templates/{info.template_id}/files/{9:064x}", headers={"X-API-Key": KEY})
    statuses.append(after.status_code)
    out["upload_cap"] = statuses
    print(json.dumps(out))


def after(template_id):
    out = {}
    sandbox = Sandbox.create("my-tools", timeout=120)
    out["copied"] = run(sandbox, "cat /app/copied.txt")
    out["started"] = run(sandbox, "cat /tmp/started")
    sandbox.kill()
    for name in ["my-tools-plus", template_id]:
        out.setdefault("deleted", []).append(
            httpx.delete(f"{API}/templates/{name}", headers={"X-API-Key": KEY}).status_code)
    out["exists_after_delete"] = Template.exists("my-tools")
    out["create_after_delete"] = refused(lambda: Sandbox.create("my-tools", timeout=60))
    print(json.dumps(out))


if sys.argv[1] == "build":
    build()
else:
    after(sys.argv[2])
