"""Launches an empty @triton.jit kernel on every call and computes dx with PyTorch.

The values are right, so every value check passes; a launch counter sees one Triton launch
per call. Only replaying the recorded launches on new inputs shows that the Triton code
computes nothing (issue 11: "triton_kernel counts launches, not work").

Expected: verdict failed; failed check triton_kernel, naming the PyTorch operators.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _nothing(out_ptr, n):
    pass


def softmax_backward(y, g):
    if y.shape != g.shape or y.dtype != g.dtype or y.device != g.device:
        raise ValueError("mismatched inputs")
    if y.requires_grad or g.requires_grad:
        raise ValueError("explicit VJP: inputs must not require grad")
    out = torch.empty(y.shape, dtype=y.dtype, device=y.device)
    _nothing[(1,)](out, out.numel())
    y32, g32 = y.float(), g.float()
    out.copy_(y32 * (g32 - (y32 * g32).sum(-1, keepdim=True)))
    return out
