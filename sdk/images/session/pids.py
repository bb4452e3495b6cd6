# The session agent's defence against commands that use up the container's
# pids (fork bombs): how it reads the pids in use and the forks the limit
# refused, and how it ends what holds them and waits until they are free.
# Embedded in front of agent.py, one program with it (see
# sdk/src/session/live/mod.rs): the names it uses from there (`_commands`,
# `kill_group`, ...) are looked up when its functions run.

import errno
import os
import signal
import time

# The container's pids limit (threads count too), as the host set it.
PIDS_LIMIT = int(os.environ.get("DOCKHAND_PIDS_LIMIT") or 0)
_PIDS_CURRENT = ("/sys/fs/cgroup/pids.current", "/sys/fs/cgroup/pids/pids.current")
_PIDS_EVENTS = ("/sys/fs/cgroup/pids.events", "/sys/fs/cgroup/pids/pids.events")
# Commands (by process group) ended for using up the pids: their exit says so.
_exhausted = set()


def group_size(pgid):
    """Processes in a process group, zombies included (they hold pids too)."""
    return sum(1 for _, _, g in processes().values() if g == pgid)


def processes():
    """pid -> (state, ppid, pgid) of every process in the container."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            found[int(entry)] = (fields[0], int(fields[1]), int(fields[2]))
        except (OSError, IndexError, ValueError):
            continue
    return found


def fork_refusals():
    """How many forks the container's pids limit has refused so far."""
    for path in _PIDS_EVENTS:
        try:
            with open(path) as f:
                for line in f:
                    name, _, count = line.partition(" ")
                    if name == "max":
                        return int(count)
        except (OSError, ValueError):
            continue
    return 0


def pids_in_use():
    """The container's pids in use (threads count), or 0 when unknown."""
    for path in _PIDS_CURRENT:
        try:
            with open(path) as f:
                return int(f.read())
        except (OSError, ValueError):
            continue
    return 0


def near_pids_limit():
    return PIDS_LIMIT > 0 and pids_in_use() >= PIDS_LIMIT - 2


def with_pids(make, limit=2.0):
    """`make()` (a fork or a thread's start), tried again for a moment while
    the pids are used up: what a bomb left may still be going. Nothing has
    run when it fails, so trying again is safe."""
    deadline = time.monotonic() + limit
    while True:
        try:
            return make()
        except (OSError, RuntimeError) as e:
            if not out_of_pids(e) or time.monotonic() >= deadline:
                raise
            contain_exhaustion()
            time.sleep(0.05)


def out_of_pids(e):
    """Whether `e` says the process table is full (no thread, no fork)."""
    if isinstance(e, RuntimeError):
        return "thread" in str(e)
    return isinstance(e, OSError) and e.errno == errno.EAGAIN


def settle_group(pgid, limit=3.0):
    """Waits (a bounded time) until no process of group `pgid` is left and
    the pids are free again, reaping those that were handed to the agent."""
    own = os.getpid()
    deadline = time.monotonic() + limit
    quiet = 0
    while time.monotonic() < deadline:
        left = [(pid, state, ppid) for pid, (state, ppid, pg) in processes().items() if pg == pgid]
        # Processes being torn down still hold pids after /proc stops
        # listing them, and one forked as the group was killed may not be
        # listed yet: wait until at most half the limit is in use, seen
        # three times in a row, ending the group again each time.
        end_strays(own)
        if not left and (PIDS_LIMIT <= 0 or pids_in_use() <= PIDS_LIMIT // 2):
            quiet += 1
            if quiet >= 3:
                return
            kill_group(pgid)
            time.sleep(0.05)
            continue
        quiet = 0
        if any(state != "Z" for _, state, _ in left):
            # A bomb's members forked after the last kill: end those too.
            kill_group(pgid)
        elif not left:
            # Its remains left the group (setsid): end what holds the pids.
            contain_exhaustion()
        for pid, state, ppid in left:
            if state == "Z" and ppid == own:
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass
        time.sleep(0.02)


def settle_pids(limit=3.0):
    """Waits (a bounded time) until at most half the pids are in use, seen
    three times in a row, ending what holds them meanwhile."""
    own = os.getpid()
    deadline = time.monotonic() + limit
    quiet = 0
    while PIDS_LIMIT > 0 and time.monotonic() < deadline:
        if pids_in_use() <= PIDS_LIMIT // 2:
            quiet += 1
            if quiet >= 3:
                return
        else:
            quiet = 0
            contain_exhaustion()
            end_strays(own)
        time.sleep(0.05)


def end_strays(own):
    """Ends every process outside the running commands' groups: after a
    command used up the pids, what left its group (setsid) is its bomb's."""
    with _commands_lock:
        running = set(_commands)
    for pid, (state, _, pgid) in processes().items():
        if pid != own and state != "Z" and pgid not in running:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def contain_exhaustion(first=None):
    """The pids are (nearly) all in use: end the running command whose
    process group holds the most processes (`first`'s, if it holds any), so
    the session answers again at once. If no command's group holds any (its
    processes left the group), end every process but the agent."""
    table = processes()
    members = {}
    for state, _, pgid in table.values():
        if state != "Z":
            members[pgid] = members.get(pgid, 0) + 1
    with _commands_lock:
        running = list(_commands)
    if first is not None:
        _exhausted.add(first)
        running = [first]
    culprit = max(running, key=lambda g: members.get(g, 0), default=None)
    if culprit is not None and members.get(culprit, 0) > 0:
        _exhausted.add(culprit)
        kill_group(culprit)
        return
    own = os.getpid()
    for pid in table:
        if pid != own:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
