"""Holds memory no resident set shows: /dev/shm filled as far as it goes, then memfds written
(never mapped) to 3 GiB in all, then waits. Where no memory cgroup could be made, the limit was
RLIMIT_AS plus a watchdog that summed resident memory: 4 GiB in unmapped memfds against a 3 GiB
limit gave the verdict passed.

Expected (graded with a 2 GiB limit, with and without a cgroup): verdict error, error.kind
resource_limit.
"""
import os
import time

CHUNK = 64 << 20
held = []
block = b"\1" * (1 << 20)
total = 0
try:
    with open("/dev/shm/held", "wb") as handle:
        while total < (3 << 30):
            handle.write(block)
            total += len(block)
except OSError:
    pass
while total < (3 << 30):
    fd = os.memfd_create("held")
    for _ in range(CHUNK // len(block)):
        os.write(fd, block)
    held.append(fd)
    total += CHUNK
time.sleep(600)


def softmax_backward(y, g):
    return y
