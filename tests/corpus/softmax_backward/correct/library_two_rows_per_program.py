"""softmax_backward with two rows per program and the whole row in one block, as some
libraries write row-wise backward kernels for short rows; the wrapper copies its inputs to
row-contiguous layout with .contiguous() first.

dx = y * (g - sum(y*g, dim=-1, keepdim=True)) for 2-D y, g (M, N), float32/float16/bfloat16.
"""
import torch
import triton
import triton.language as tl

ROWS_PER_PROGRAM = 2


@triton.jit
def _two_rows(y_ptr, g_ptr, dx_ptr, n_rows, n_cols, stride, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    offsets = rows[:, None] * stride + cols[None, :]
    y = tl.load(y_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + offsets, mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(y * g, axis=1)
    tl.store(dx_ptr + offsets, (y * (g - dot[:, None])).to(dx_ptr.dtype.element_ty), mask=mask)


def softmax_backward(y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    if not (isinstance(y, torch.Tensor) and isinstance(g, torch.Tensor)):
        raise TypeError("expected tensors")
    if y.dim() != 2 or y.shape != g.shape:
        raise ValueError("y and g must be 2-D with equal shapes")
    if y.dtype != g.dtype or y.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise TypeError("y and g must share a float16/bfloat16/float32 dtype")
    if y.device != g.device:
        raise ValueError("y and g live on different devices")
    if y.requires_grad or g.requires_grad:
        raise ValueError("inputs must not require grad")
    y = y.contiguous()
    g = g.contiguous()
    n_rows, n_cols = y.shape
    dx = torch.empty_like(y)
    if n_rows and n_cols:
        block = triton.next_power_of_2(n_cols)
        grid = (triton.cdiv(n_rows, ROWS_PER_PROGRAM),)
        _two_rows[grid](y, g, dx, n_rows, n_cols, y.stride(0), ROWS=ROWS_PER_PROGRAM, BLOCK=block,
                        num_warps=min(32, max(4, block // 2048)))
    return dx
