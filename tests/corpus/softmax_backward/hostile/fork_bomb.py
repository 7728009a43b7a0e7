"""Forks up to 1000 processes inside the first call; each child sleeps for a minute.

It prints a line FORKED <n> after each fork that succeeded, and FORKS_STOPPED <n> when the process limit stopped it; the error propagates. Expected: at most max_processes processes exist at once; verdict error,
error.kind resource_limit; the sleeping children die with the sandbox.
"""
import os
import sys
import time

import torch

_started = []


def softmax_backward(y, g):
    if not _started:
        try:
            for _ in range(1000):
                pid = os.fork()
                if pid == 0:
                    time.sleep(60)
                    os._exit(0)
                _started.append(pid)
                sys.stdout.write(f"FORKED {len(_started)}\n")
                sys.stdout.flush()
        finally:
            sys.stdout.write(f"FORKS_STOPPED {len(_started)}\n")
            sys.stdout.flush()
    raise OSError("could not fork")
