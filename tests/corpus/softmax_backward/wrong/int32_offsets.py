"""softmax_backward whose row offsets are computed in int32.

A correct looped kernel except for one thing: `row * row_stride` is computed in int32
(tl.program_id(0) is int32, and so are the strides Triton passes). Once a tensor has more than
2^31 elements, rows past that offset wrap around to a negative offset: an illegal address on
the GPU, or someone else's memory. Real libraries have shipped this bug. Every check with
tensors below 2^31 elements passes; only the GPU-only large_offsets check, (65545, 32768)
float16, shows it (on the CPU interpreter that check is skipped, so this file passes there).

Expected failed checks: large_offsets

Expected hint: int32
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _bwd(y_ptr, g_ptr, dx_ptr, N, sym, syn, sgm, sgn, sdm, BLOCK: tl.constexpr):
    row = tl.program_id(0)  # BUG: int32; row * sym overflows past 2^31 elements
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + offs
        m = cols < N
        y = tl.load(y_ptr + row * sym + cols * syn, mask=m, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * sgm + cols * sgn, mask=m, other=0.0).to(tl.float32)
        acc += y * g
    dot = tl.sum(acc, axis=0)
    for start in range(0, N, BLOCK):
        cols = start + offs
        m = cols < N
        y = tl.load(y_ptr + row * sym + cols * syn, mask=m, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * sgm + cols * sgn, mask=m, other=0.0).to(tl.float32)
        tl.store(dx_ptr + row * sdm + cols, (y * (g - dot)).to(dx_ptr.dtype.element_ty), mask=m)


def softmax_backward(y, g):
    if y.shape != g.shape:
        raise ValueError("shape mismatch")
    if y.dtype != g.dtype:
        raise TypeError("dtype mismatch")
    if y.device != g.device:
        raise ValueError("device mismatch")
    if y.requires_grad or g.requires_grad:
        raise ValueError("requires grad")
    M, N = y.shape
    dx = torch.empty((M, N), dtype=y.dtype, device=y.device)
    _bwd[(M,)](y, g, dx, N, y.stride(0), y.stride(1), g.stride(0), g.stride(1), dx.stride(0), BLOCK=2048)
    return dx
