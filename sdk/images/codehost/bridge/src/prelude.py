# Fed to every Monty session before the user's code (see prelude.rs): what
# the code may use without importing, the loop guards the strict policy
# inserts and the fan-out of gathers. The part between the two "loop guards"
# markers is fed under the strict policy only: the default inserts no guards,
# and those definitions are a third of a fresh session's cost.
# A guard raises KeyboardInterrupt, which `except Exception` does not catch;
# the bridge reports it as the loop limit (the time limit stands behind it
# either way). The placeholders DH_LOOP_LIMIT and DH_TICK_LIMIT (one more),
# in double underscores, are replaced by the host's loop limit.
import asyncio
from asyncio import gather
import json, math, re, datetime
from collections import Counter, defaultdict
ToolError = RuntimeError


# -- loop guards: begin --
from itertools import chain as _dh_chain, islice as _dh_islice


# Reached once the first limit's worth of items is spent: one more item means
# the loop is over the limit. Monty's own islice and chain carry the items, so
# a counted loop costs about 1.6x an unguarded one (a class with __next__ per
# item cost 5-6x); a dict or set that changes size still raises as in a plain
# loop, since its own iterator is the one being advanced.
class _dh_LoopEnd:
    def __init__(self, it, line):
        self.it = it
        self.line = line

    def __iter__(self):
        return self

    def __next__(self):
        for _ in self.it:
            raise KeyboardInterrupt("_dh_loop_limit:" + str(self.line))
        raise StopIteration


# Comprehensions (which have no `else:`) iterate through `_dh_loop`.
# Containers whose size at the loop's start bounds the loop: at most the
# limit's worth of items is iterated as Monty iterates it, at full speed (a
# dict or set that changes size raises; a list grown inside its own loop is
# left to the time and memory limits). Anything else is counted.
_dh_sized = (range, list, tuple, str, bytes, dict, set, frozenset)


def _dh_loop(it, line):
    if isinstance(it, _dh_sized) and len(it) <= __DH_LOOP_LIMIT__:
        return it
    it = iter(it)
    return _dh_chain(_dh_islice(it, __DH_LOOP_LIMIT__), _dh_LoopEnd(it, line))


# A `for` statement's guard: `for x in (_dh_gK := _dh_guard(it))[0]:` and an
# `else:` that calls `_dh_end(_dh_gK, line)`. Monty's own islice carries the
# items (a chain per item cost about 0.4x more), and only a loop that ends
# without `break` looks for one item more. The walrus keeps the pair in the
# loop's own scope, so recursion cannot mix two loops' iterators up.
def _dh_guard(it):
    if isinstance(it, _dh_sized) and len(it) <= __DH_LOOP_LIMIT__:
        return (it, None)
    it = iter(it)
    return (_dh_islice(it, __DH_LOOP_LIMIT__), it)


def _dh_end(guard, line):
    rest = guard[1]
    if rest is not None:
        for _ in rest:
            raise KeyboardInterrupt("_dh_loop_limit:" + str(line))


_dh_ticks = {}


def _dh_tick(k, line):
    n = _dh_ticks.get(k, 0) + 1
    _dh_ticks[k] = n
    if n > __DH_TICK_LIMIT__:
        raise KeyboardInterrupt("_dh_loop_limit:" + str(line))
    return True
# -- loop guards: end --


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
