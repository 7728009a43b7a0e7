"""softmax_backward that drops the dot term: dx = y * g (only the diagonal of the Jacobian).

Elementwise 1-D kernel over the flattened (M, N) index space; no reduction at all.

Expected failed checks: example_two_element, autograd_fp32, half_precision, central_difference,
    row_sum_invariant, strided_inputs, edge_shapes, fresh_results

Expected hint: dot term is missing
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _diag_only(y_ptr, g_ptr, out_ptr, total, N, sy0, sy1, sg0, sg1, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = idx < total
    r = idx // N
    c = idx % N
    y = tl.load(y_ptr + r * sy0 + c * sy1, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + r * sg0 + c * sg1, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + idx, (y * g).to(out_ptr.dtype.element_ty), mask=mask)  # BUG: no "- dot"


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
    out = torch.empty((M, N), dtype=y.dtype, device=y.device)
    total = M * N
    BLOCK = 65536
    _diag_only[(triton.cdiv(total, BLOCK),)](y, g, out, total, N, y.stride(0), y.stride(1), g.stride(0),
                                             g.stride(1), BLOCK=BLOCK)
    return out
