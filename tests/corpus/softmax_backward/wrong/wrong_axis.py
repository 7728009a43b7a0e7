"""softmax_backward that reduces down the columns (axis 0) instead of along each row.

Each program owns a strip of BLOCK_N columns and every row of it, as a [BLOCK_M, BLOCK_N]
tile, and sums y*g over axis=0: one "dot" per column instead of one per row. With one row
this computes dx = y * (g - y*g), so even the two-element example is wrong.

Expected failed checks: example_two_element, autograd_fp32, half_precision, central_difference,
    row_sum_invariant, strided_inputs, edge_shapes, fresh_results

Expected hint: dim 0
"""
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_bwd_columns(Y, G, DX, M, N, sym, syn, sgm, sgn, sdm,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    r = tl.arange(0, BLOCK_M)
    c = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (r[:, None] < M) & (c[None, :] < N)
    y = tl.load(Y + r[:, None] * sym + c[None, :] * syn, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(G + r[:, None] * sgm + c[None, :] * sgn, mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(y * g, axis=0)  # BUG: the softmax ran over the last dim, this sums over rows
    dx = y * (g - dot[None, :])
    tl.store(DX + r[:, None] * sdm + c[None, :], dx.to(DX.dtype.element_ty), mask=mask)


def softmax_backward(y, g):
    if not (isinstance(y, torch.Tensor) and isinstance(g, torch.Tensor)):
        raise TypeError("y and g must be tensors")
    if y.shape != g.shape:
        raise ValueError("shape mismatch")
    if y.dtype != g.dtype:
        raise TypeError("dtype mismatch")
    if y.device != g.device:
        raise ValueError("device mismatch")
    if y.requires_grad or g.requires_grad:
        raise RuntimeError("inputs must not require grad")
    M, N = y.shape
    out = torch.empty(M, N, dtype=y.dtype, device=y.device)
    BLOCK_M = triton.next_power_of_2(M)
    BLOCK_N = max(1, min(1024, 16384 // BLOCK_M))
    grid = (triton.cdiv(N, BLOCK_N),)
    softmax_bwd_columns[grid](y, g, out, M, N, y.stride(0), y.stride(1), g.stride(0), g.stride(1),
                              out.stride(0), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
    return out
