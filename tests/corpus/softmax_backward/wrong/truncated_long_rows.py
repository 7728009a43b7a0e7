"""softmax_backward that handles at most 16384 columns: one block per row, no loop.

BLOCK = min(next_power_of_2(N), 16384); columns past the first block are never read (so the
dot misses them) and never written (torch.empty leaves garbage there).

Expected failed checks: half_precision, edge_shapes

Expected hint: unwritten
"""
import torch
import triton
import triton.language as tl

MAX_BLOCK = 16384


@triton.jit
def softmax_backward_kernel(y_ptr, g_ptr, dx_ptr, n_cols, y_row_stride, y_col_stride, g_row_stride,
                            g_col_stride, dx_row_stride, BLOCK_SIZE: tl.constexpr):
    row_idx = tl.program_id(0)
    col_offsets = tl.arange(0, BLOCK_SIZE)
    mask = col_offsets < n_cols
    y = tl.load(y_ptr + row_idx * y_row_stride + col_offsets * y_col_stride, mask=mask, other=0.0)
    g = tl.load(g_ptr + row_idx * g_row_stride + col_offsets * g_col_stride, mask=mask, other=0.0)
    y = y.to(tl.float32)
    g = g.to(tl.float32)
    dot = tl.sum(y * g, axis=0)
    dx = y * (g - dot)
    tl.store(dx_ptr + row_idx * dx_row_stride + col_offsets, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def softmax_backward(y, g):
    if y.shape != g.shape:
        raise ValueError("y and g shapes differ")
    if y.dtype != g.dtype:
        raise TypeError("y and g dtypes differ")
    if y.device != g.device:
        raise ValueError("y and g devices differ")
    if y.requires_grad or g.requires_grad:
        raise ValueError("y and g must not require grad")
    n_rows, n_cols = y.shape
    BLOCK_SIZE = min(triton.next_power_of_2(n_cols), MAX_BLOCK)  # BUG: no loop past one block
    dx = torch.empty((n_rows, n_cols), dtype=y.dtype, device=y.device)
    softmax_backward_kernel[(n_rows,)](y, g, dx, n_cols, y.stride(0), y.stride(1), g.stride(0), g.stride(1),
                                       dx.stride(0), BLOCK_SIZE=BLOCK_SIZE)
    return dx
