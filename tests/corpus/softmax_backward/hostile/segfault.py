"""Dereferences a null pointer inside the first call: the process dies of SIGSEGV.

Expected: verdict error, error.kind crash, naming the signal; the grader itself lives.
"""
import ctypes

import torch


def softmax_backward(y, g):
    ctypes.string_at(0)
    return torch.zeros_like(y)
