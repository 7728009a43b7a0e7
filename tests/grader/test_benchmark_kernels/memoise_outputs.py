"""Benchmark cheat: memoise outputs by input address during warm-up, replay them when timed.

A correct kernel computes each (y, g) address pair once; later calls on the same buffers return
the remembered tensor without launching anything, so timed calls do no work. The benchmark
refills the buffers with new values (same addresses) before timing and re-verifies the timed
outputs, so this must end with no score (stale outputs; times under the floor).
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _row_kernel(y_ptr, g_ptr, dx_ptr, N, sym, syn, sgm, sgn, sdm, BLOCK: tl.constexpr):
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


def _compute(y, g):
    if y.shape != g.shape or y.dtype != g.dtype or y.dim() != 2:
        raise ValueError("bad inputs")
    if y.requires_grad or g.requires_grad:
        raise ValueError("requires grad")
    m, n = y.shape
    dx = torch.empty((m, n), dtype=y.dtype, device=y.device)
    if m and n:
        _row_kernel[(m,)](y, g, dx, n, y.stride(0), y.stride(1), g.stride(0), g.stride(1), dx.stride(0),
                          BLOCK=min(4096, triton.next_power_of_2(n)), num_warps=8)
    return dx


_MEMO = {}


def softmax_backward(y, g):
    key = (y.data_ptr(), g.data_ptr(), tuple(y.shape), y.dtype)
    if key not in _MEMO:
        _MEMO[key] = _compute(y, g)
    return _MEMO[key]
