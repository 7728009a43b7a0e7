"""softmax_backward that assumes contiguous rows: row stride N and column stride 1 for y and g.

A 2-D row-block kernel, otherwise right. Transposed or step-sliced views are read as if they
were contiguous, so every strided case reads the wrong elements (and the NaN padding between
them).

Expected failed checks: strided_inputs

Expected hint: own strides
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(Y, G, O, M, N, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    offsets = rows[:, None] * N + cols[None, :]  # BUG: ignores y.stride() and g.stride()
    y = tl.load(Y + offsets, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + offsets, mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(y * g, axis=1)
    tl.store(O + offsets, (y * (g - dot[:, None])).to(O.dtype.element_ty), mask=mask)


def softmax_backward(y, g):
    if y.shape != g.shape:
        raise ValueError("y and g must have the same shape")
    if y.dtype != g.dtype:
        raise TypeError("y and g must have the same dtype")
    if y.device != g.device:
        raise ValueError("y and g must be on the same device")
    if y.requires_grad or g.requires_grad:
        raise ValueError("detach y and g first")
    M, N = y.shape
    out = torch.empty_like(y, memory_format=torch.contiguous_format)
    BLOCK = triton.next_power_of_2(N)
    ROWS = min(triton.next_power_of_2(M), max(1, 16384 // BLOCK))
    _kernel[(triton.cdiv(M, ROWS),)](y, g, out, M, N, ROWS=ROWS, BLOCK=BLOCK)
    return out
