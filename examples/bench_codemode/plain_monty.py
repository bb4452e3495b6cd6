# Plain Monty's side of bench_codemode: pydantic-monty's own pool, in the
# code host's image, on the snippets the benchmark runs through a code host.
# Prints a JSON list of [name, p50 in ms].
import json
import statistics
import time

import pydantic_monty as pm

RANGE_LOOP = "t = 0\nfor i in range(10000):\n    t += i\nt"
ITER_LOOP = "t = 0\nfor i in iter(range(10000)):\n    t += i\nt"


def p50(samples):
    return statistics.median(samples) * 1e3


def timed(run, n):
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        run()
        samples.append(time.perf_counter() - t)
    return p50(samples)


figures = []
with pm.Monty() as pool:
    with pool.checkout() as s:
        for _ in range(50):
            s.feed_run("1 + 1")
        figures.append(["trivial, a feed on a held session", timed(lambda: s.feed_run("1 + 1"), 300)])
        figures.append(["a range loop of 10,000", timed(lambda: s.feed_run(RANGE_LOOP), 50)])
        figures.append(["an iterator loop of 10,000", timed(lambda: s.feed_run(ITER_LOOP), 50)])

    def fresh():
        with pool.checkout() as s:
            s.feed_run("1 + 1")

    figures.append(["trivial, checkout + feed + finish", timed(fresh, 300)])

    # An external call's round trip, as the benchmark measures the code
    # host's: 50 sequential calls of a host function minus a trivial feed,
    # over 50. A fresh checkout each time: a checkout allows a bounded number
    # of external calls.
    calls = "t = 0\nfor i in range(50):\n    t += noop(i)\nt"
    lookup = {"noop": lambda x: x}
    samples = []
    for _ in range(40):
        with pool.checkout() as s:
            s.feed_run("1 + 1")
            t = time.perf_counter()
            s.feed_run("1 + 1")
            base = time.perf_counter() - t
            t = time.perf_counter()
            s.feed_run(calls, external_lookup=lookup)
            samples.append(max(time.perf_counter() - t - base, 0) / 50)
    figures.append(["an external call's round trip", p50(samples)])
print(json.dumps(figures))
