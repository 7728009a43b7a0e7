"""softmax_cross_entropy_backward with the softmax over the wrong axis: each column of x is
normalised across the rows (dim=0) instead of each row across the classes (dim=-1).

Each program takes a block of columns and walks down the rows for each column's max and
sum-exp, then writes (p - y) * grad / n_valid with that column-wise p. Rows of dx no longer sum to 0; on a single
row every p is 1.

triton_kernel is not run: every value check fails, and the replay judges only the launches of
checks that passed (a failed check has shown the arithmetic wrong already).

Expected failed checks: example_three_class, autograd_fp32, half_precision, central_difference,
    row_sum_invariant, ignore_index, stability_large_logits, strided_inputs, edge_shapes, fresh_results,
    training_step

Expected hint: dim 0
"""
import torch
import triton
import triton.language as tl

BLOCK_M = 16
BLOCK_C = 1024
COUNT_BLOCK = 1024


@triton.jit
def _count_valid_kernel(t_ptr, nvalid_ptr, M, st, ignore_index, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    t = tl.load(t_ptr + i * st, mask=i < M, other=ignore_index)
    tl.atomic_add(nvalid_ptr, tl.sum((t != ignore_index).to(tl.int32), axis=0))


@triton.jit
def _xent_col_kernel(x_ptr, t_ptr, grad_ptr, nvalid_ptr, dx_ptr, M, C, sxm, sxc, st, sdm, ignore_index,
                     BLOCK_M: tl.constexpr, BLOCK_C: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    col_ok = cols < C
    offs = tl.arange(0, BLOCK_M)
    n_valid = tl.load(nvalid_ptr).to(tl.float32)
    grad = tl.load(grad_ptr)
    col_max = tl.full([BLOCK_C], float("-inf"), tl.float32)
    for start in range(0, M, BLOCK_M):
        rows = start + offs
        mask = (rows < M)[:, None] & col_ok[None, :]
        x = tl.load(x_ptr + rows[:, None] * sxm + cols[None, :] * sxc, mask=mask, other=float("-inf")).to(tl.float32)
        col_max = tl.maximum(col_max, tl.max(x, axis=0))  # BUG: reduces over rows (dim 0)
    col_max = tl.where(col_ok, col_max, 0.0)
    col_sum = tl.zeros([BLOCK_C], tl.float32)
    for start in range(0, M, BLOCK_M):
        rows = start + offs
        mask = (rows < M)[:, None] & col_ok[None, :]
        x = tl.load(x_ptr + rows[:, None] * sxm + cols[None, :] * sxc, mask=mask, other=float("-inf")).to(tl.float32)
        col_sum += tl.sum(tl.exp(x - col_max[None, :]), axis=0)
    col_sum = tl.where(col_ok, col_sum, 1.0)
    for start in range(0, M, BLOCK_M):
        rows = start + offs
        row_ok = rows < M
        mask = row_ok[:, None] & col_ok[None, :]
        x = tl.load(x_ptr + rows[:, None] * sxm + cols[None, :] * sxc, mask=mask, other=float("-inf")).to(tl.float32)
        target = tl.load(t_ptr + rows * st, mask=row_ok, other=ignore_index)
        scale = tl.where(target != ignore_index, grad / tl.maximum(n_valid, 1.0), 0.0)
        p = tl.exp(x - col_max[None, :]) / col_sum[None, :]
        dx = (p - tl.where(cols[None, :] == target[:, None], 1.0, 0.0)) * scale[:, None]
        tl.store(dx_ptr + rows[:, None] * sdm + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)


def softmax_cross_entropy_backward(x, t, grad, ignore_index=-100):
    for name, value in (("x", x), ("t", t), ("grad", grad)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor")
    if x.dim() != 2 or x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError("x must be a 2-D float32/float16/bfloat16 tensor")
    if t.dtype != torch.int64 or t.shape != (x.shape[0],):
        raise ValueError(f"t must be int64 of shape ({x.shape[0]},)")
    if grad.shape != () or grad.dtype != torch.float32:
        raise ValueError("grad must be a 0-d float32 tensor")
    if t.device != x.device or grad.device != x.device:
        raise ValueError("x, t and grad must be on one device")
    if x.requires_grad or grad.requires_grad:
        raise ValueError("inputs must not require grad")
    m, c = x.shape
    valid = t != ignore_index
    if bool((valid & ((t < 0) | (t >= c))).any()):
        raise ValueError("target out of range")
    dx = torch.empty((m, c), dtype=x.dtype, device=x.device)
    n_valid = torch.zeros(1, dtype=torch.int32, device=x.device)
    _count_valid_kernel[(triton.cdiv(m, COUNT_BLOCK),)](t, n_valid, m, t.stride(0), ignore_index, BLOCK=COUNT_BLOCK)
    _xent_col_kernel[(triton.cdiv(c, BLOCK_C),)](x, t, grad, n_valid, dx, m, c, x.stride(0), x.stride(1),
                                                 t.stride(0), dx.stride(0), ignore_index, BLOCK_M=BLOCK_M,
                                                 BLOCK_C=BLOCK_C)
    return dx
