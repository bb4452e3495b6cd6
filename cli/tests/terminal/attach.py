"""Drives `dockhand session attach` on a real pseudo-terminal with pexpect.

attach.py DOCKHAND SESSION_ID typing   -> a typing session's checks, as JSON
attach.py DOCKHAND SESSION_ID abandon  -> starts `sleep 1234` in the
    attached shell, then kills the command with SIGKILL; prints its pid
"""
import json
import re
import signal
import sys
import time

import pexpect

dockhand, session, mode = sys.argv[1:4]
TIMEOUT = 60


def typing():
    found = {}
    # The command's own exit code and its terminal's mode after it, read by
    # the shell that ran it: raw mode must be gone.
    child = pexpect.spawn(
        "/bin/sh",
        ["-c", f'"{dockhand}" session attach {session}; echo "exit=$?"; stty -a'],
        dimensions=(30, 100),
        timeout=TIMEOUT,
        encoding="utf-8",
        codec_errors="replace",
    )
    child.sendline("echo M1-$((40 + 2))")
    child.expect("M1-42")
    child.sendline("stty size; tty")
    child.expect(r"(\d+) (\d+)\s+(/dev/\S+)")
    found["size"] = [int(child.match.group(1)), int(child.match.group(2))]
    found["tty"] = child.match.group(3)
    # The window's new size reaches the shell's terminal (the command
    # forwards SIGWINCH; it may take a moment).
    child.setwinsize(40, 120)
    resized = None
    for attempt in range(20):
        time.sleep(0.25)
        child.sendline(f"echo R{attempt}=$(stty size)")
        child.expect(rf"R{attempt}=(\d+ \d+)")
        resized = child.match.group(1)
        if resized == "40 120":
            break
    found["resized"] = resized
    # Keys go through as typed: `read -n 1` gets one key with no Enter.
    child.sendline('read -r -s -n 1 key; echo "key=[$key]"')
    time.sleep(0.5)
    child.send("x")
    child.expect(r"key=\[(.)\]")
    found["one_key"] = child.match.group(1)
    # Ctrl-C reaches the command in the session's foreground, not the CLI.
    child.sendline("sleep 30; echo NOT-$((3 * 3))")
    time.sleep(1)
    started = time.monotonic()
    child.sendintr()
    child.sendline("echo M2-$((1 + 1))")
    child.expect("M2-2")
    found["interrupt_s"] = round(time.monotonic() - started, 2)
    found["still_attached"] = True
    found["reached_after_interrupt"] = "NOT-9" in child.before
    child.sendline("exit 7")
    child.expect(r"exit=(\d+)")
    found["exit_code"] = int(child.match.group(1))
    child.expect(pexpect.EOF)
    modes = child.before
    found["canonical_after"] = bool(re.search(r"(?<!-)\bicanon\b", modes))
    found["echo_after"] = bool(re.search(r"(?<![-\w])echo\b", modes))
    child.close()
    print(json.dumps(found))


def abandon():
    child = pexpect.spawn(
        dockhand, ["session", "attach", session], timeout=TIMEOUT, encoding="utf-8"
    )
    child.sendline("echo M3-$((2 + 3))")
    child.expect("M3-5")
    child.sendline("sleep 1234")
    time.sleep(1)
    pid = child.pid
    child.kill(signal.SIGKILL)
    child.close(force=True)
    print(json.dumps({"killed": pid}))


{"typing": typing, "abandon": abandon}[mode]()
