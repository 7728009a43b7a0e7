"""softmax_backward in the style of Triton's fused-softmax tutorial: one program per row, the
whole row in one block.

dx = y * (g - sum(y*g, dim=-1, keepdim=True)) for 2-D y, g (M, N), float32/float16/bfloat16,
any strides. BLOCK = next_power_of_2(N) holds the entire row, so y and g are read once and dx
written once (3 memory accesses per element). The number of warps grows with the block, as in
the tutorial's first version, so a long row keeps a few hundred elements per thread (Triton's
compile time grows steeply with that). Row offsets are int64: row * row_stride overflows int32
once a tensor has more than 2^31 elements.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_backward_row(y_ptr, g_ptr, dx_ptr, n_cols, y_row_stride, y_col_stride, g_row_stride, g_col_stride,
                          dx_row_stride, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_SIZE)
    mask = cols < n_cols
    y = tl.load(y_ptr + row * y_row_stride + cols * y_col_stride, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + row * g_row_stride + cols * g_col_stride, mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(y * g, axis=0)
    dx = y * (g - dot)
    tl.store(dx_ptr + row * dx_row_stride + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def _num_warps(block_size: int) -> int:
    if block_size >= 32768:
        return 32
    if block_size >= 8192:
        return 16
    if block_size >= 2048:
        return 8
    return 4


def softmax_backward(y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """The softmax VJP of probabilities y and upstream gradient g, both (M, N).

    Raises TypeError for non-tensors or unsupported/mismatched dtypes, ValueError for other
    mismatches (shape, device, dimensions) and for inputs that require grad.
    """
    if not isinstance(y, torch.Tensor) or not isinstance(g, torch.Tensor):
        raise TypeError("y and g must be torch.Tensor")
    if y.dim() != 2 or g.dim() != 2:
        raise ValueError(f"y and g must be 2-D, got {y.dim()}-D and {g.dim()}-D")
    if y.shape != g.shape:
        raise ValueError(f"shape mismatch: {tuple(y.shape)} vs {tuple(g.shape)}")
    if y.dtype != g.dtype or y.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"dtypes must match and be float32/float16/bfloat16: {y.dtype}, {g.dtype}")
    if y.device != g.device:
        raise ValueError(f"device mismatch: {y.device} vs {g.device}")
    if y.requires_grad or g.requires_grad:
        raise ValueError("y and g must not require grad (this is an explicit VJP)")
    n_rows, n_cols = y.shape
    dx = torch.empty((n_rows, n_cols), dtype=y.dtype, device=y.device)
    if n_rows == 0 or n_cols == 0:
        return dx
    block_size = triton.next_power_of_2(n_cols)
    _softmax_backward_row[(n_rows,)](
        y, g, dx, n_cols, y.stride(0), y.stride(1), g.stride(0), g.stride(1), dx.stride(0),
        BLOCK_SIZE=block_size, num_warps=_num_warps(block_size))
    return dx
