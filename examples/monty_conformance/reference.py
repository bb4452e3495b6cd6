# The reference side of the monty_conformance example: runs every case in
# /cases in plain Monty (pydantic-monty, a fresh interpreter each, the code
# host's default limits) and prints one JSON line per case, its value in the
# code host's exact encoding.
import asyncio
import json
import os

import pydantic_monty as pm

# exact.py (prepended) reads Monty's class instances as `$instance`.
CLASS_PROXY = pm.MontyClassProxy

PRINT_LIMIT = 16 * 1024
LIMITS = {
    "max_feed_duration_secs": 30.0,
    "max_memory": 256 << 20,
    "max_recursion_depth": 200,
    "max_suspensions": 2 * 10_000 + 100,
}


class Printed:
    def __init__(self):
        self.parts, self.size, self.cut = [], 0, False

    def __call__(self, stream, text):
        if self.cut:
            return
        room = PRINT_LIMIT - self.size
        if len(text) > room:
            text, self.cut = text[:room], True
        self.parts.append(text)
        self.size += len(text)

    def text(self):
        return "".join(self.parts)


async def main():
    async with pm.AsyncMonty() as pool:
        for name in sorted(os.listdir("/cases")):
            code = open("/cases/" + name, encoding="utf-8").read()
            out = Printed()
            result = {"name": name}
            try:
                async with pool.checkout(limits=LIMITS) as s:
                    value = await s.feed_run(code, print_callback=out)
                try:
                    result["value"] = to_wire(value)
                except NotJson:
                    result["class"] = "value-error"
            except pm.MontySyntaxError:
                result["class"] = "SyntaxError"
            except pm.MontyRuntimeError as e:
                result["class"] = type(e.exception()).__name__
            except pm.MontyError as e:
                result["class"] = type(e).__name__
            result["stdout"] = out.text()
            print(json.dumps(result), flush=True)


asyncio.run(main())
# Leave at once: the interpreter's shutdown with the pool's threads can abort.
os._exit(0)
