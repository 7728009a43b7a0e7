"""Hostile upload for the GPU end-to-end run: loops forever inside the call."""
import torch
import triton
import triton.language as tl


@triton.jit
def _never_used(x_ptr):
    pass


def softmax_backward(y, g):
    while True:
        pass
