# The workload of probe_python_sdt_test.sh. CPython's own USDT probes
# (Debian's python3.11 is built with them, each behind a semaphore that the
# interpreter tests before it prepares the arguments): gc__start(generation)
# and gc__done(collected) fire at every collection. Automatic collections
# are off; the workload makes reference cycles, collects them, and prints
# each generation it asked for and what each collection found: the values
# the last collections recorded must have.
import gc
import os
import sys

gc.disable()


class Node:
    def __init__(self):
        self.other = self


asked, found = [], []
for n, generation in enumerate((0, 1, 2, 0, 2, 1, 2)):
    cycles = [Node() for _ in range(10 * n)]
    del cycles
    asked.append(generation)
    found.append(gc.collect(generation))
print("generations", *asked)
print("collected", *found)
# No collection after the workload's: the interpreter's finalization
# collects too.
sys.stdout.flush()
os._exit(0)
