"""A submission that imports a package that is not installed.

Expected: verdict error, error.kind import.
"""
import torch
import triton_helpers_from_my_laptop  # noqa: F401  (does not exist)


def softmax_backward(y, g):
    return y * (g - (y * g).sum(-1, keepdim=True))
