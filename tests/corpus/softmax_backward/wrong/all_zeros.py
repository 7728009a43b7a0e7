"""The starter skeleton handed in unchanged: the kernel only stores zeros.

Zeros have row sums of exactly 0 and are right for N = 1 rows, so row_sum_invariant and two of
the edge shapes pass; the scale-aware tolerance still rejects zeros everywhere else, long
rows included (dx is O(1/N) there, below any fixed atol).

Expected failed checks: example_two_element, autograd_fp32, half_precision, central_difference,
    strided_inputs, edge_shapes, fresh_results

Expected hint: all zeros
"""
import torch
import triton
import triton.language as tl


@triton.jit
def softmax_backward_kernel(y_ptr, g_ptr, dx_ptr, n_cols, stride_y, stride_g, stride_dx,
                            BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    for start in range(0, n_cols, BLOCK_SIZE):
        offs = start + tl.arange(0, BLOCK_SIZE)
        mask = offs < n_cols
        # TODO: load y and g, compute dot = sum(y * g) and dx = y * (g - dot)
        dx = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
        tl.store(dx_ptr + row * stride_dx + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def softmax_backward(y, g):
    if y.shape != g.shape:
        raise ValueError("shape mismatch")
    if y.dtype != g.dtype:
        raise TypeError("dtype mismatch")
    if y.device != g.device:
        raise ValueError("device mismatch")
    if y.requires_grad or g.requires_grad:
        raise ValueError("requires grad")
    n_rows, n_cols = y.shape
    dx = torch.empty((n_rows, n_cols), dtype=y.dtype, device=y.device)
    softmax_backward_kernel[(n_rows,)](y, g, dx, n_cols, y.stride(0), g.stride(0), dx.stride(0), BLOCK_SIZE=4096)
    return dx
