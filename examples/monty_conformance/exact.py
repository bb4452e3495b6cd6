# The code host's exact encoding (CodeHostConfig::exact_values) written in
# Python, for CPython's and plain Monty's values: the reference side of the
# monty_conformance example and test, and of the codemode_values test.
import base64
import datetime
import math


class NotJson(Exception):
    pass


# Set by a caller whose values include Monty's class instances.
CLASS_PROXY = None


def to_wire(v, depth=0):
    """A value in the code host's exact encoding (CodeHostConfig::exact_values)."""
    if depth > 100:
        raise NotJson("nested too deeply")
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return v
    if isinstance(v, int):
        return v if -2**63 <= v < 2**64 else {"$int": str(v)}
    if isinstance(v, float):
        if math.isnan(v):
            return {"$float": "nan"}
        if math.isinf(v):
            return {"$float": "inf" if v > 0 else "-inf"}
        return v
    if isinstance(v, list):
        return [to_wire(x, depth + 1) for x in v]
    if isinstance(v, tuple):
        return {"$tuple": [to_wire(x, depth + 1) for x in v]}
    if isinstance(v, frozenset):
        return {"$frozenset": [to_wire(x, depth + 1) for x in v]}
    if isinstance(v, set):
        return {"$set": [to_wire(x, depth + 1) for x in v]}
    if isinstance(v, bytes):
        return {"$bytes": base64.b64encode(v).decode()}
    if isinstance(v, datetime.datetime):
        return {"$datetime": v.isoformat()}
    if isinstance(v, datetime.date):
        return {"$date": v.isoformat()}
    if isinstance(v, datetime.time):
        return {"$time": v.isoformat()}
    if isinstance(v, datetime.timedelta):
        return {"$timedelta": {"days": v.days, "seconds": v.seconds, "microseconds": v.microseconds}}
    if isinstance(v, dict):
        if all(isinstance(k, str) for k in v) and not (len(v) == 1 and next(iter(v)).startswith("$")):
            return {k: to_wire(x, depth + 1) for k, x in v.items()}
        return {"$dict": [[to_wire(k, depth + 1), to_wire(x, depth + 1)] for k, x in v.items()]}
    if CLASS_PROXY is not None and isinstance(v, CLASS_PROXY):
        attrs = {k: to_wire(x, depth + 1) for k, x in v.attributes.items()}
        return {"$instance": {"class": v.name, "attrs": attrs}}
    if type(v).__name__ == "Decimal":
        return {"$decimal": str(v)}
    raise NotJson(type(v).__name__)
