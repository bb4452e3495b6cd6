# The CPython side of the monty_conformance example and test: runs every case
# in /cases in CPython (a fresh interpreter each, as a REPL would: the last
# expression's value is the result) and prints one JSON line per case, its
# value in the code host's exact encoding. Cases that need the suite's own
# external functions, or that Monty's suite marks as failing on CPython, are
# reported as "skip".
import json
import os
import re
import subprocess
import sys

PRINT_LIMIT = 16 * 1024

# Run in a child process per case (without site, and importing as little as
# it can, since the start is most of a case's time): a case may change the
# interpreter's state (modules, recursion limit) or loop for ever.
CASE = r'''
import ast, builtins, io, json, sys
code = open(sys.argv[1], encoding="utf-8").read()
out = io.StringIO()
result = {}
try:
    tree = ast.parse(code)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    body = compile(tree, "main.py", "exec", flags=flags)
    tail = compile(last, "main.py", "eval", flags=flags) if last else None
    scope = {"__name__": "__main__", "__builtins__": builtins}

    def is_async(c):
        return c is not None and c.co_flags & 0x80  # CO_COROUTINE: top-level await

    async def both():
        r = eval(body, scope)
        if hasattr(r, "__await__"):
            await r
        v = eval(tail, scope) if tail else None
        return (await v) if hasattr(v, "__await__") else v

    sys.stdout = out
    try:
        if is_async(body) or is_async(tail):
            import asyncio

            value = asyncio.run(both())
        else:
            exec(body, scope)
            value = eval(tail, scope) if tail else None
    finally:
        sys.stdout = sys.__stdout__
    try:
        result["value"] = to_wire(value)
    except NotJson:
        result["class"] = "value-error"
except SyntaxError:
    result["class"] = "SyntaxError"
except BaseException as e:
    result["class"] = type(e).__name__
result["stdout"] = out.getvalue()[:PRINT_LIMIT]
print(json.dumps(result))
'''

META = re.compile(r"^# ///.*?^# ///", re.S | re.M)


def skipped(code):
    meta = META.search(code)
    text = meta.group(0) if meta else ""
    return "call-external" in text or "cpython" in text


def main():
    runner = EXACT + "\nPRINT_LIMIT = %d\n" % PRINT_LIMIT + CASE
    for name in sorted(os.listdir("/cases")):
        path = "/cases/" + name
        result = {"name": name}
        if skipped(open(path, encoding="utf-8").read()):
            result["class"] = "skip"
        else:
            try:
                done = subprocess.run(
                    [sys.executable, "-S", "-c", runner, path],
                    capture_output=True,
                    timeout=30,
                    text=True,
                )
                lines = done.stdout.strip().splitlines()
                result.update(json.loads(lines[-1]) if lines else {"class": "crash"})
            except subprocess.TimeoutExpired:
                result["class"] = "TimeoutError"
        print(json.dumps(result), flush=True)


main()
