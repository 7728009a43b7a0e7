"""softmax_backward with the subtraction the wrong way round: dx = y * (dot - g).

One program per row, two loops over the row in chunks (a sound structure); the chain rule was
misremembered. Negating dx keeps every row sum at ~0, so row_sum_invariant cannot see it;
the value checks can.

Expected failed checks: example_two_element, autograd_fp32, half_precision, central_difference,
    strided_inputs, edge_shapes, fresh_results

Expected hint: sign
"""
import torch
import triton
import triton.language as tl

CHUNK = 2048


@triton.jit
def _softmax_grad_row(y_ptr, g_ptr, out_ptr, n_cols, ys0, ys1, gs0, gs1, os0, CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, CHUNK)
    acc = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, n_cols, CHUNK):
        idx = start + offs
        ok = idx < n_cols
        yv = tl.load(y_ptr + row * ys0 + idx * ys1, mask=ok, other=0.0).to(tl.float32)
        gv = tl.load(g_ptr + row * gs0 + idx * gs1, mask=ok, other=0.0).to(tl.float32)
        acc += yv * gv
    dot = tl.sum(acc, axis=0)
    for start in range(0, n_cols, CHUNK):
        idx = start + offs
        ok = idx < n_cols
        yv = tl.load(y_ptr + row * ys0 + idx * ys1, mask=ok, other=0.0).to(tl.float32)
        gv = tl.load(g_ptr + row * gs0 + idx * gs1, mask=ok, other=0.0).to(tl.float32)
        res = yv * (dot - gv)  # BUG: sign flipped, should be yv * (gv - dot)
        tl.store(out_ptr + row * os0 + idx, res.to(out_ptr.dtype.element_ty), mask=ok)


def softmax_backward(y, g):
    for t in (y, g):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise TypeError("expected 2-D tensors")
        if t.requires_grad:
            raise ValueError("input requires grad")
    if y.shape != g.shape:
        raise ValueError(f"shapes differ: {y.shape} vs {g.shape}")
    if y.dtype != g.dtype:
        raise TypeError(f"dtypes differ: {y.dtype} vs {g.dtype}")
    if y.device != g.device:
        raise ValueError(f"devices differ: {y.device} vs {g.device}")
    m, n = y.shape
    out = torch.empty((m, n), dtype=y.dtype, device=y.device)
    _softmax_grad_row[(m,)](y, g, out, n, y.stride(0), y.stride(1), g.stride(0), g.stride(1), out.stride(0),
                            CHUNK=CHUNK)
    return out
