"""Allocates 16 GiB of ones inside the first call (far past the memory limit).

Expected: verdict error, error.kind resource_limit; the grader and the machine live.
"""
import torch


def softmax_backward(y, g):
    hog = torch.ones(16 * 2**30, dtype=torch.uint8)
    return hog[: y.numel()].view(y.shape).to(y.dtype)
