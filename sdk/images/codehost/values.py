"""Values crossing between the host's JSON and Monty's Python objects.

Datetimes travel tagged (`{"$datetime": iso}`, `{"$date": iso}`,
`{"$timedelta": seconds}`) from the host and as ISO strings and seconds back.
"""

import datetime
import json
import math

import pydantic_monty as pm


class NotJson(Exception):
    """A value that cannot cross to the host."""


def from_wire(value):
    """Host JSON -> Python values for Monty (tagged datetimes become objects)."""
    if isinstance(value, list):
        return [from_wire(v) for v in value]
    if isinstance(value, dict):
        if len(value) == 1:
            (key, inner), = value.items()
            if key == "$datetime" and isinstance(inner, str):
                return datetime.datetime.fromisoformat(inner)
            if key == "$date" and isinstance(inner, str):
                return datetime.date.fromisoformat(inner)
            if key == "$timedelta" and isinstance(inner, (int, float)):
                return datetime.timedelta(seconds=inner)
        return {k: from_wire(v) for k, v in value.items()}
    return value


# Tools take JSON as the host reads it: an int past 64 bits would reach them
# rounded to a float, so it is refused instead.
_INT_RANGE = (-(1 << 63), (1 << 64) - 1)


def argument_to_wire(value):
    """A tool argument -> JSON for the host (NotJson when it cannot go)."""
    wired = to_wire(value)
    _check_ints(wired)
    return wired


def _check_ints(value):
    if isinstance(value, int) and not isinstance(value, bool):
        if not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            raise NotJson(f"the int {value} does not fit in 64 bits; pass it as a str")
    elif isinstance(value, list):
        for item in value:
            _check_ints(item)
    elif isinstance(value, dict):
        for item in value.values():
            _check_ints(item)


def to_wire(value, depth=0):
    """Python values from Monty -> JSON for the host."""
    if depth > 100:
        raise NotJson("the value is nested more than 100 levels deep")
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJson(f"{value!r} is not a JSON number")
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
                raise NotJson(f"a dict key of type {type(k).__name__} is not JSON; use str keys")
            out[k if isinstance(k, str) else json.dumps(k)] = to_wire(v, depth + 1)
        return out
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, (pm.MontyClassProxy,)):
        return to_wire(value.attributes, depth + 1)
    if isinstance(value, (bytes, bytearray)):
        raise NotJson("bytes are not JSON; decode them to str first")
    raise NotJson(f"a value of type {type(value).__name__} is not JSON")
