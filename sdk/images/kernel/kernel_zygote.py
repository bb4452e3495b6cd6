"""dockhand kernel fork server: imports what a kernel needs once (ipykernel,
IPython and the modules the contexts' startup code imports), then forks
each context's kernel from itself. A new context then starts without
importing anything again, and shares those pages with its siblings.

The relay starts it with its run directory (which marks its processes)
and the modules to import as its arguments, and
speaks JSON lines with it:

  relay -> fork server  {"argv": [ipykernel arguments], "cwd", "env": {...}, "stderr": path}
                        {"import": [modules]}   (bound modules a context used; no answer)
  fork server -> relay  {"pid": N}        (the kernel, now the relay's child)
                        {"error": "..."}

Each kernel is forked twice and its middle process exits at once, so the
kernel is re-parented to the relay (a subreaper): the relay waits for it,
signals it and collects its exit status as for a kernel it started itself.
It runs the user's modules, so it counts as the kernels' code: the relay
checks what it says (the pid is its child and a session leader) and starts
kernels itself if this process is gone.
"""

import ctypes
import json
import os
import signal
import sys


def prctl(option, value):
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def preload(modules):
    import contextlib
    import importlib
    import warnings

    # numpy's BLAS threads are stopped around fork by its own handlers;
    # Python's warning about forking a threaded process says nothing here.
    warnings.filterwarnings("ignore", message=".*fork.*", category=DeprecationWarning)
    # ipykernel's visual debugger (debugpy, a third of its import time) is
    # for JupyterLab's debugger panel, which no dockhand client opens: it is
    # left out as ipykernel leaves it out where debugpy is missing. The
    # module itself stays importable by the kernels' code.
    hidden = "debugpy" not in sys.modules
    if hidden:
        sys.modules["debugpy"] = None
    try:
        # This process's stdout is its answers to the relay: what a module
        # prints as it is imported goes to stderr (nowhere).
        with contextlib.redirect_stdout(sys.stderr):
            for name in modules:
                try:
                    importlib.import_module(name)
                except BaseException:
                    pass
    finally:
        if hidden and sys.modules.get("debugpy", 0) is None:
            del sys.modules["debugpy"]


def become_kernel(req):
    """In the forked kernel (its own session already): its files, signals
    and seeds; then ipykernel, as `python -m ipykernel_launcher` would run it."""
    prctl(4, 1)  # PR_SET_DUMPABLE: a kernel is an ordinary process again
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL)
    devnull = os.open(os.devnull, os.O_RDWR)
    err = os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.dup2(err, 2)
    os.close(devnull)
    os.close(err)
    # Nothing of the fork server (its pipes to the relay) stays open.
    os.closerange(3, 1 << 16)
    os.environ.clear()
    os.environ.update(req["env"])
    os.chdir(req["cwd"])
    # Siblings forked from one process share its random state; numpy's
    # global generator does not reseed itself after a fork.
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        try:
            numpy_random.seed()
        except Exception:
            pass
    sys.argv = ["ipykernel_launcher"] + list(req["argv"])
    from ipykernel import kernelapp

    kernelapp.launch_new_instance(argv=list(req["argv"]))


def spawn(req):
    """Forks the kernel; answers its pid once it is the relay's child."""
    r, w = os.pipe()
    middle = os.fork()
    if middle == 0:
        code = 0
        try:
            os.close(r)
            # The kernel's command line is the fork server's: its name says
            # what it is, from its first instant (the relay checks it).
            ctypes.CDLL(None).prctl(15, b"dockhand-kernel", 0, 0, 0)  # PR_SET_NAME
            if os.fork() == 0:
                try:
                    # Its own session before the fork server answers: the
                    # relay takes only a session leader for a kernel, and
                    # answering first let a busy machine check too soon.
                    os.setsid()
                    os.write(w, b"%d" % os.getpid())
                    os.close(w)
                    become_kernel(req)
                finally:
                    os._exit(0)
        except BaseException:
            code = 70
        os._exit(code)
    os.close(w)
    # The pipe ends once the middle process has exited and the kernel has
    # written its pid (as a session leader); the kernel is then the relay's.
    with os.fdopen(r, "rb") as f:
        text = f.read()
    os.waitpid(middle, 0)
    if not text:
        return {"error": "the fork server could not fork"}
    return {"pid": int(text)}


def main():
    # Kernels' code runs as this user: a non-dumpable fork server keeps its
    # pipes to the relay out of their reach (/proc/<pid>/fd).
    prctl(4, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Not the helpers' directory: kernels see the path a kernel started on
    # its own sees.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        del sys.path[0]
    preload(sys.argv[2:])
    inp = os.fdopen(0, "rb", buffering=0)
    for line in iter(inp.readline, b""):
        try:
            req = json.loads(line)
            if "import" in req:
                # Modules a context's code used: later kernels start with
                # them. Not answered (the relay pairs answers with forks).
                preload([str(m) for m in req["import"]])
                continue
            reply = spawn(req)
        except Exception as e:
            reply = {"error": "%s: %s" % (type(e).__name__, e)}
        os.write(1, (json.dumps(reply) + "\n").encode())


if __name__ == "__main__":
    main()
