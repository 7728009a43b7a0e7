"""Correct, deliberately simple softmax_backward: one program per row, two loops over chunks.

dx = y * (g - sum(y*g, dim=-1, keepdim=True)) for 2-D y, g (M, N), float32/float16/bfloat16,
any strides. Pass 1 accumulates the row's dot product in float32 chunk by chunk; pass 2 reads
the row again and writes dx. Not tuned: 5 memory accesses per element and one program per row.
"""
import torch
import triton
import triton.language as tl

BLOCK = 4096


@triton.jit
def _row_kernel(y_ptr, g_ptr, dx_ptr, N, sym, syn, sgm, sgn, sdm, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK).to(tl.int64)
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
        dx = y * (g - dot)
        tl.store(dx_ptr + row * sdm + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def softmax_backward(y, g):
    if not isinstance(y, torch.Tensor) or not isinstance(g, torch.Tensor):
        raise TypeError("y and g must be torch.Tensor")
    if y.dim() != 2 or g.dim() != 2:
        raise ValueError(f"y and g must be 2-D, got {y.dim()}-D and {g.dim()}-D")
    if y.shape != g.shape:
        raise ValueError(f"shape mismatch: {tuple(y.shape)} vs {tuple(g.shape)}")
    if y.dtype != g.dtype:
        raise TypeError(f"dtype mismatch: {y.dtype} vs {g.dtype}")
    if y.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"unsupported dtype {y.dtype}")
    if y.device != g.device:
        raise ValueError(f"device mismatch: {y.device} vs {g.device}")
    if y.requires_grad or g.requires_grad:
        raise ValueError("inputs must not require grad")
    m, n = y.shape
    dx = torch.empty((m, n), dtype=y.dtype, device=y.device)
    if m == 0 or n == 0:
        return dx
    _row_kernel[(m,)](y, g, dx, n, y.stride(0), y.stride(1), g.stride(0), g.stride(1),
                      dx.stride(0), BLOCK=BLOCK, num_warps=4)
    return dx
