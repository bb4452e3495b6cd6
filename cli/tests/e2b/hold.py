"""Creates two sandboxes (a code interpreter and a base one), says `ready`
and waits to be killed with the server."""

import sys
import time

from e2b import Sandbox as BaseSandbox
from e2b_code_interpreter import Sandbox

kernel = Sandbox.create(timeout=600)
kernel.run_code("x = 1")
plain = BaseSandbox.create(template="base", timeout=600)
plain.commands.run("sleep 1 &")
print("ready", flush=True)
time.sleep(600)
sys.exit(0)
