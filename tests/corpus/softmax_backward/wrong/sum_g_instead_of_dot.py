"""softmax_backward with the row reduction taken over g alone: dot = sum(g), not sum(y*g).

One pass over [ROWS, BLOCK_N] tiles that hold whole rows. The bug: the student reduced the
upstream gradient instead of the product y*g, so dx = y * (g - sum(g)). Every value check
fails except on N = 1 rows (where sum(g) = y*g because y = 1).

Expected failed checks: example_two_element, autograd_fp32, half_precision, central_difference,
    row_sum_invariant, strided_inputs, edge_shapes, fresh_results

Expected hint: not sum(g)
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _bwd_tile(y_ptr, g_ptr, dx_ptr, M, N, s_ym, s_yn, s_gm, s_gn, s_dm,
              ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    y = tl.load(y_ptr + rows[:, None] * s_ym + cols[None, :] * s_yn, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + rows[:, None] * s_gm + cols[None, :] * s_gn, mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(g, axis=1)  # BUG: should be tl.sum(y * g, axis=1)
    dx = y * (g - dot[:, None])
    tl.store(dx_ptr + rows[:, None] * s_dm + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)


def softmax_backward(y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    if y.shape != g.shape or y.dim() != 2:
        raise ValueError(f"expected matching 2-D tensors, got {tuple(y.shape)} and {tuple(g.shape)}")
    if y.dtype != g.dtype or y.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"bad dtypes {y.dtype}, {g.dtype}")
    if y.device != g.device:
        raise ValueError("y and g must be on the same device")
    if y.requires_grad or g.requires_grad:
        raise ValueError("softmax_backward is an explicit VJP; pass detached tensors")
    M, N = y.shape
    dx = torch.empty((M, N), dtype=y.dtype, device=y.device)
    BLOCK_N = triton.next_power_of_2(N)
    ROWS = min(triton.next_power_of_2(M), max(1, 8192 // BLOCK_N))
    _bwd_tile[(triton.cdiv(M, ROWS),)](y, g, dx, M, N, y.stride(0), y.stride(1), g.stride(0), g.stride(1),
                                       dx.stride(0), ROWS=ROWS, BLOCK_N=BLOCK_N)
    return dx
