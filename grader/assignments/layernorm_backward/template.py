"""layernorm_backward.py: starter file (assignment ``layernorm_backward``).

Write the backward pass of layer norm, y = (x - mean) * rstd * w + b, as Triton kernels, from
the statistics the forward pass saved:

    xhat = (x - mean) * rstd,  wdy = w * dy
    c1 = sum_j(xhat * wdy) / N,  c2 = sum_j(wdy) / N          (per row)
    dx = (wdy - (xhat * c1 + c2)) * rstd
    dw = sum over rows of dy * xhat,  db = sum over rows of dy

dy, x (M, N) and w (N,) are float32, float16 or bfloat16 (one dtype, each with its own
strides); mean and rstd (M,) are float32. Return (dx, dw, db), fresh contiguous tensors of
x's dtype. dw and db sum across rows: partial buffers under a lock (Triton tutorial 05),
atomics into fp32 buffers, or a second kernel are all fine; the sums stay in fp32. Check
locally with ``grader check layernorm_backward.py``; hand in with
``grader submit layernorm_backward.py``. The checks and their tolerances: docs/checks.md.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _layernorm_bwd_dx_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, N,
                             stride_dym, stride_dyn, stride_xm, stride_xn, stride_w, stride_mean, stride_rstd,
                             stride_dxm, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)  # noqa: F841 - the template leaves the kernel body to the student
    # TODO: load this row of x and dy and all of w (fp32, masked past N), xhat = (x - mean) * rstd
    # (zero it past N), c1 and c2, then store dx. Rows longer than BLOCK_N need a loop.
    pass


def layernorm_backward(dy, x, w, mean, rstd):
    if x.dim() != 2 or dy.shape != x.shape or w.shape != (x.shape[1],) or mean.shape != (x.shape[0],) \
            or rstd.shape != (x.shape[0],):
        raise ValueError("need dy, x (M, N), w (N,), mean and rstd (M,)")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16) or dy.dtype != x.dtype or w.dtype != x.dtype:
        raise TypeError("dy, x and w must share one float32/float16/bfloat16 dtype")
    if mean.dtype != torch.float32 or rstd.dtype != torch.float32:
        raise TypeError("mean and rstd must be float32")
    if any(t.device != x.device for t in (dy, w, mean, rstd)):
        raise ValueError("all inputs must be on one device")
    if any(t.requires_grad for t in (dy, x, w, mean, rstd)):
        raise ValueError("layernorm_backward is an explicit backward: inputs must not require grad")
    m, n = x.shape
    dx = torch.empty((m, n), dtype=x.dtype, device=x.device)
    dw = torch.empty((n,), dtype=x.dtype, device=x.device)
    db = torch.empty((n,), dtype=x.dtype, device=x.device)
    block_n = min(triton.next_power_of_2(max(n, 1)), 4096)
    _layernorm_bwd_dx_kernel[(m,)](dy, x, w, mean, rstd, dx, n, dy.stride(0), dy.stride(1), x.stride(0), x.stride(1),
                                   w.stride(0), mean.stride(0), rstd.stride(0), dx.stride(0), BLOCK_N=block_n)
    # TODO: dw and db (a reduction across rows, in Triton).
    return dx, dw, db
