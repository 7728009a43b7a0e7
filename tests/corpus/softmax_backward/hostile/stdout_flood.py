"""Prints 200 MB to stdout inside the first call.

Expected: the child is killed once it passes the output cap; verdict error,
error.kind resource_limit; the stored log keeps only its head and tail.
"""
import sys

import torch

_LINE = ("spam " * 200 + "\n") * 1000  # ~1 MB


def softmax_backward(y, g):
    for _ in range(200):
        sys.stdout.write(_LINE)
    sys.stdout.flush()
    return torch.zeros_like(y)
