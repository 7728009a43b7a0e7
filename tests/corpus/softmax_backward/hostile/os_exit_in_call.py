"""Answers the first call correctly, then calls os._exit(0) inside the second call.

os._exit skips every handler: no exception, exit status 0. The checks that finished before it
(example_two_element) are kept.

Expected: verdict error, error.kind exited; checks == [example_two_element passed].
"""
import os

import torch
import triton
import triton.language as tl

_calls = []


@triton.jit
def _vjp_rows(y_ptr, g_ptr, dx_ptr, N, sym, syn, sgm, sgn, sdm, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + offs
        mask = cols < N
        y = tl.load(y_ptr + row * sym + cols * syn, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * sgm + cols * sgn, mask=mask, other=0.0).to(tl.float32)
        acc += y * g
    dot = tl.sum(acc, axis=0)
    for start in range(0, N, BLOCK):
        cols = start + offs
        mask = cols < N
        y = tl.load(y_ptr + row * sym + cols * syn, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * sgm + cols * sgn, mask=mask, other=0.0).to(tl.float32)
        tl.store(dx_ptr + row * sdm + cols, (y * (g - dot)).to(dx_ptr.dtype.element_ty), mask=mask)


def _checked_vjp(y, g):
    if not isinstance(y, torch.Tensor) or not isinstance(g, torch.Tensor):
        raise TypeError("y and g must be tensors")
    if y.dim() != 2 or y.shape != g.shape:
        raise ValueError("y and g must be 2-D of the same shape")
    if y.dtype != g.dtype:
        raise TypeError("dtype mismatch")
    if y.device != g.device:
        raise ValueError("device mismatch")
    if y.requires_grad or g.requires_grad:
        raise ValueError("inputs must not require grad")
    m, n = y.shape
    dx = torch.empty((m, n), dtype=y.dtype, device=y.device)
    _vjp_rows[(m,)](y, g, dx, n, y.stride(0), y.stride(1), g.stride(0), g.stride(1), dx.stride(0), BLOCK=4096)
    return dx


def softmax_backward(y, g):
    _calls.append(1)
    if len(_calls) >= 2:
        os._exit(0)
    return _checked_vjp(y, g)
