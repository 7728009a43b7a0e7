"""softmax_backward the way kernel libraries write it: the whole row in one block, and
@triton.autotune over six launch configs (warps x pipeline stages), keyed on the row length.

dx = y * (g - sum(y*g, dim=-1, keepdim=True)) for 2-D y, g (M, N), float32/float16/bfloat16.
The wrapper makes both inputs row-contiguous with .contiguous() (a copy only when they are
not), so the kernel indexes rows by one stride; BLOCK_SIZE = next_power_of_2(N) holds a row.
"""
import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({}, num_warps=warps, num_stages=stages) for warps in (4, 8, 16) for stages in (1, 2)],
    key=["n_cols"],
)
@triton.jit
def _softmax_bwd_kernel(dy_ptr, y_ptr, dx_ptr, row_stride, n_cols, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_cols
    dy = tl.load(dy_ptr + row * row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + row * row_stride + offsets, mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(dy * y, axis=0)
    tl.store(dx_ptr + row * row_stride + offsets, (y * (dy - dot)).to(dx_ptr.dtype.element_ty), mask=mask)


def softmax_backward(y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    if not isinstance(y, torch.Tensor) or not isinstance(g, torch.Tensor):
        raise TypeError("y and g must be tensors")
    if y.ndim != 2 or y.shape != g.shape:
        raise ValueError(f"y and g must be 2-D of one shape, got {tuple(y.shape)} and {tuple(g.shape)}")
    if y.dtype != g.dtype or y.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"unsupported or mismatched dtypes {y.dtype}, {g.dtype}")
    if y.device != g.device:
        raise ValueError("y and g must be on one device")
    if y.requires_grad or g.requires_grad:
        raise ValueError("y and g must not require grad")
    y, g = y.contiguous(), g.contiguous()
    n_rows, n_cols = y.shape
    dx = torch.empty_like(y)
    if dx.numel() == 0:
        return dx
    _softmax_bwd_kernel[(n_rows,)](g, y, dx, y.stride(0), n_cols, BLOCK_SIZE=triton.next_power_of_2(n_cols))
    return dx
