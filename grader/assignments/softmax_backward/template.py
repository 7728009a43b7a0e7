"""softmax_backward.py: starter file (assignment ``softmax_backward``, workshop I2).

Write the softmax VJP as a Triton kernel, without forming the N x N Jacobian:

    dot[r]   = sum_j y[r, j] * g[r, j]          (one reduction per row, in fp32)
    dx[r, j] = y[r, j] * (g[r, j] - dot[r])

y (probabilities) and g (upstream gradient dL/dy) are (M, N) tensors of float32, float16 or
bfloat16, each with its own row and column strides. Return a fresh contiguous tensor of y's
dtype. Check locally with ``grader check softmax_backward.py``; hand in with
``grader submit softmax_backward.py``. The checks and their tolerances: docs/checks.md.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_backward_kernel(y_ptr, g_ptr, dx_ptr, n_cols,
                             stride_ym, stride_yn, stride_gm, stride_gn, stride_dxm,
                             BLOCK_N: tl.constexpr):
    row = tl.program_id(0)  # noqa: F841 - the template leaves the kernel body to the student
    # TODO: load this row of y and g with their own strides (mask the columns past n_cols),
    # convert both to fp32, reduce y * g once, and store y * (g - dot) in the output's dtype.
    # Rows longer than BLOCK_N need a loop over the row in chunks.
    pass


def softmax_backward(y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    if y.shape != g.shape or y.dim() != 2:
        raise ValueError(f"y and g must be 2-D tensors of one shape, got {tuple(y.shape)} and {tuple(g.shape)}")
    if y.dtype != g.dtype:
        raise TypeError(f"y and g must have one dtype, got {y.dtype} and {g.dtype}")
    if y.device != g.device:
        raise ValueError(f"y and g must be on one device, got {y.device} and {g.device}")
    if y.requires_grad or g.requires_grad:
        raise ValueError("softmax_backward is an explicit VJP: y and g must not require grad")
    n_rows, n_cols = y.shape
    dx = torch.empty((n_rows, n_cols), dtype=y.dtype, device=y.device)
    block_n = min(triton.next_power_of_2(max(n_cols, 1)), 4096)
    _softmax_backward_kernel[(n_rows,)](y, g, dx, n_cols, y.stride(0), y.stride(1), g.stride(0), g.stride(1),
                                        dx.stride(0), BLOCK_N=block_n)
    return dx
