# Fed to every Monty session before the user's code (see prelude.rs): what
# the code may use without importing, the loop guards the strict policy
# inserts and the fan-out of gathers.
# A guard raises KeyboardInterrupt, which `except Exception` does not catch;
# the bridge reports it as the loop limit (the time limit stands behind it
# either way). The placeholders DH_LOOP_LIMIT and DH_TICK_LIMIT (one more),
# in double underscores, are replaced by the host's loop limit.
import asyncio
from asyncio import gather
import json, math, re, datetime
from collections import Counter, defaultdict
ToolError = RuntimeError


# An iterator class, not map() over itertools.count() (a third of the cost per
# iteration): through map, Monty no longer reports a dict or set changed
# during the loop as its own for loop does (five of its test cases differ).
class _DhLoop:
    def __init__(self, it, line):
        self.it = iter(it)
        self.line = line
        self.n = 0

    def __iter__(self):
        return self

    def __next__(self):
        x = next(self.it)
        self.n += 1
        if self.n > __DH_LOOP_LIMIT__:
            raise KeyboardInterrupt("_dh_loop_limit:" + str(self.line))
        return x


# Containers whose size at the loop's start bounds the loop: at most the
# limit's worth of items is iterated as Monty iterates it, at full speed (a
# dict or set that changes size raises; a list grown inside its own loop is
# left to the time and memory limits). Anything else is counted.
_DH_SIZED = (range, list, tuple, str, bytes, dict, set, frozenset)


def _dh_loop(it, line):
    if isinstance(it, _DH_SIZED) and len(it) <= __DH_LOOP_LIMIT__:
        return it
    return _DhLoop(it, line)


_dh_ticks = {}


def _dh_tick(k, line):
    n = _dh_ticks.get(k, 0) + 1
    _dh_ticks[k] = n
    if n > __DH_TICK_LIMIT__:
        raise KeyboardInterrupt("_dh_loop_limit:" + str(line))
    return True


# A gather over a comprehension of calls of one tool is rewritten to fan
# out (bridge/src/fanout.rs): the comprehension packs each call's arguments
# and the gather becomes one external call carrying all of them: each
# `t(x, k=1)` becomes `("t", _dh_args(x, k=1))`.
def _dh_args(*args, **kwargs):
    return (args, kwargs)


def _dh_fan(gather):
    def fan(*packs):
        return _dh_fanout(packs)

    return fan
