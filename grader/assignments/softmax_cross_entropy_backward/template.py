"""softmax_cross_entropy_backward.py: starter file (assignment ``softmax_cross_entropy_backward``).

Write the gradient of the mean softmax cross-entropy with respect to the logits as Triton
kernels, one fused pass per row, without forming the C x C softmax Jacobian (it collapses to
p - y, see the lesson):

    valid[r]  = t[r] != ignore_index
    n_valid   = number of valid rows
    p[r, :]   = softmax(x[r, :])                    (subtract the row max before exp, in fp32)
    dx[r, j]  = (p[r, j] - (j == t[r])) * grad / n_valid     for valid rows
    dx[r, :]  = 0                                   for ignored rows (all rows when n_valid == 0)

Arguments:
    x: logits (M, C), float32, float16 or bfloat16, with its own row and column strides.
    t: int64 targets (M,), any stride, each a class in [0, C) or equal to ignore_index.
    grad: 0-d float32 tensor on x's device: dL/dloss of loss = F.cross_entropy(x, t,
        ignore_index=ignore_index) (mean over valid rows). A tensor, so a kernel can read it
        without copying it to the host.
    ignore_index: int, default -100 (PyTorch's); it may also be a class index.

Return a fresh contiguous (M, C) tensor of x's dtype. Raise ValueError or TypeError for
mismatched shapes/dtypes/devices, for x or grad requiring grad, and for targets that are
neither ignore_index nor in [0, C).

All of dx must come from your Triton kernels, n_valid included: the grader replays each call's
Triton launches alone on new x, t and grad (check triton_kernel), and so does the GPU
benchmark. The wrapper may validate, allocate and zero buffers; a count or a sum made with
PyTorch there is not replayed.

Example (the lesson's numbers): x = log([0.25, 0.60, 0.15]), t = [1], grad = 1 gives
dx = [0.25, -0.40, 0.15]. Check locally with
``grader check softmax_cross_entropy_backward.py --assignment softmax_cross_entropy_backward``;
the checks and their tolerances: docs/checks.md.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _count_valid_kernel(t_ptr, n_valid_ptr, n_rows, stride_t, ignore_index, BLOCK: tl.constexpr):
    # TODO: this program (tl.program_id(0)) counts its BLOCK targets (t_ptr + index * stride_t,
    # masked past n_rows) that are != ignore_index and adds the count to n_valid_ptr with
    # tl.atomic_add.
    pass


@triton.jit
def _xent_backward_kernel(x_ptr, t_ptr, grad_ptr, n_valid_ptr, dx_ptr, n_cols,
                          stride_xm, stride_xc, stride_t, stride_dxm, ignore_index,
                          BLOCK_C: tl.constexpr):
    # TODO: this program handles row tl.program_id(0). Load the row's target
    # (t_ptr + row * stride_t), n_valid and grad. Loop over the row in chunks of BLOCK_C (mask
    # the columns past n_cols, load as fp32): keep a running max and a running sum of
    # exp(x - max), rescaling the sum when the max grows. Then loop again and store
    # (exp(x - max) / sum - (col == target)) * grad / n_valid, or 0 for an ignored row.
    pass


def softmax_cross_entropy_backward(x: torch.Tensor, t: torch.Tensor, grad: torch.Tensor,
                                   ignore_index: int = -100) -> torch.Tensor:
    if x.dim() != 2 or t.dim() != 1 or t.shape[0] != x.shape[0]:
        raise ValueError(f"x must be (M, C) and t (M,), got {tuple(x.shape)} and {tuple(t.shape)}")
    if t.dtype != torch.int64:
        raise TypeError(f"t must be int64 class indices, got {t.dtype}")
    if grad.dim() != 0:
        raise ValueError(f"grad must be a 0-d tensor, got shape {tuple(grad.shape)}")
    if t.device != x.device or grad.device != x.device:
        raise ValueError("x, t and grad must be on one device")
    if x.requires_grad or grad.requires_grad:
        raise ValueError("softmax_cross_entropy_backward is an explicit backward: x and grad must not require grad")
    # TODO: reject targets that are neither ignore_index nor in [0, C) (ValueError).
    n_rows, n_cols = x.shape
    dx = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
    n_valid = torch.zeros(1, dtype=torch.int32, device=x.device)
    _count_valid_kernel[(triton.cdiv(n_rows, 1024),)](t, n_valid, n_rows, t.stride(0), ignore_index, BLOCK=1024)
    block_c = min(triton.next_power_of_2(max(n_cols, 1)), 4096)
    _xent_backward_kernel[(n_rows,)](x, t, grad, n_valid, dx, n_cols, x.stride(0), x.stride(1), t.stride(0),
                                     dx.stride(0), ignore_index, BLOCK_C=block_c)
    return dx
