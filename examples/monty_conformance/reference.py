# The reference side of the monty_conformance example: runs every case in
# /cases in plain Monty (pydantic-monty, a fresh interpreter each, the code
# host's default limits) and prints one JSON line per case, its value made
# JSON as the code host makes it.
import asyncio
import datetime
import json
import math
import os

import pydantic_monty as pm

PRINT_LIMIT = 16 * 1024
LIMITS = {
    "max_feed_duration_secs": 30.0,
    "max_memory": 256 << 20,
    "max_recursion_depth": 200,
    "max_suspensions": 2 * 10_000 + 100,
}


class NotJson(Exception):
    pass


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


def to_wire(value, depth=0):
    if depth > 100:
        raise NotJson("nested too deeply")
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJson("not a JSON number")
        return value
    if isinstance(value, (list, tuple)):
        return [to_wire(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [to_wire(v, depth + 1) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, (str, int, float, bool)) and k is not None:
                raise NotJson("a key that is not JSON")
            out[k if isinstance(k, str) else json.dumps(k)] = to_wire(v, depth + 1)
        return out
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, pm.MontyClassProxy):
        return to_wire(value.attributes, depth + 1)
    raise NotJson(type(value).__name__)


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
