"""Creates N sandboxes of a template (eight at a time), prints "ready",
holds them until a line comes on stdin, then kills them."""

import sys
from concurrent.futures import ThreadPoolExecutor

from e2b import Sandbox

N = int(sys.argv[1])
TEMPLATE = sys.argv[2]


def main():
    with ThreadPoolExecutor(8) as pool:
        made = list(pool.map(lambda _: Sandbox.create(template=TEMPLATE, timeout=3600), range(N)))
    print("ready", flush=True)
    sys.stdin.readline()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda s: s.kill(), made))


if __name__ == "__main__":
    main()
