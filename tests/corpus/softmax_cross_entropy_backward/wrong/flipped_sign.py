"""softmax_cross_entropy_backward with the subtraction the wrong way round: dx = (y - p) * grad / n_valid.

Negating dx keeps every row sum at ~0, so row_sum_invariant cannot see it; the value checks can.

triton_kernel is not run: every value check fails, and the replay judges only the launches of
checks that passed (a failed check has shown the arithmetic wrong already).

Expected failed checks: example_three_class, autograd_fp32, half_precision, central_difference,
    ignore_index, stability_large_logits, strided_inputs, edge_shapes, fresh_results, training_step

Expected hint: sign
"""
import torch
import triton
import triton.language as tl

CHUNK = 1024
COUNT_BLOCK = 1024


@triton.jit
def _count_valid_kernel(t_ptr, nvalid_ptr, M, st, ignore_index, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    t = tl.load(t_ptr + i * st, mask=i < M, other=ignore_index)
    tl.atomic_add(nvalid_ptr, tl.sum((t != ignore_index).to(tl.int32), axis=0))


@triton.jit
def _xent_row_kernel(x_ptr, t_ptr, grad_ptr, nvalid_ptr, dx_ptr, C, sxm, sxc, st, sdm, ignore_index,
                     CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, CHUNK)
    target = tl.load(t_ptr + row * st)
    n_valid = tl.load(nvalid_ptr).to(tl.float32)
    grad = tl.load(grad_ptr)
    scale = tl.where(target != ignore_index, grad / tl.maximum(n_valid, 1.0), 0.0)
    run_max = float("-inf")
    run_sum = 0.0
    for start in range(0, C, CHUNK):
        cols = start + offs
        x = tl.load(x_ptr + row * sxm + cols * sxc, mask=cols < C, other=float("-inf")).to(tl.float32)
        new_max = tl.maximum(run_max, tl.max(x, axis=0))
        run_sum = run_sum * tl.exp(run_max - new_max) + tl.sum(tl.exp(x - new_max), axis=0)
        run_max = new_max
    for start in range(0, C, CHUNK):
        cols = start + offs
        mask = cols < C
        x = tl.load(x_ptr + row * sxm + cols * sxc, mask=mask, other=float("-inf")).to(tl.float32)
        p = tl.exp(x - run_max) / run_sum
        dx = (tl.where(cols == target, 1.0, 0.0) - p) * scale  # BUG: y - p
        tl.store(dx_ptr + row * sdm + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def softmax_cross_entropy_backward(x, t, grad, ignore_index=-100):
    for name, value in (("x", x), ("t", t), ("grad", grad)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor")
    if x.dim() != 2:
        raise ValueError(f"x must be 2-D, got {tuple(x.shape)}")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"unsupported dtype {x.dtype}")
    if t.dtype != torch.int64:
        raise TypeError(f"targets must be int64, got {t.dtype}")
    if t.shape != (x.shape[0],):
        raise ValueError(f"t must have shape ({x.shape[0]},), got {tuple(t.shape)}")
    if grad.shape != () or grad.dtype != torch.float32:
        raise ValueError("grad must be a 0-d float32 tensor")
    if t.device != x.device or grad.device != x.device:
        raise ValueError("x, t and grad must be on one device")
    if x.requires_grad or grad.requires_grad:
        raise ValueError("inputs must not require grad")
    m, c = x.shape
    valid = t != ignore_index
    if bool((valid & ((t < 0) | (t >= c))).any()):
        raise ValueError(f"targets must be in [0, {c}) or equal to ignore_index {ignore_index}")
    dx = torch.empty((m, c), dtype=x.dtype, device=x.device)
    if m == 0 or c == 0:
        return dx
    n_valid = torch.zeros(1, dtype=torch.int32, device=x.device)
    _count_valid_kernel[(triton.cdiv(m, COUNT_BLOCK),)](t, n_valid, m, t.stride(0), ignore_index, BLOCK=COUNT_BLOCK)
    _xent_row_kernel[(m,)](x, t, grad, n_valid, dx, c, x.stride(0), x.stride(1), t.stride(0), dx.stride(0),
                           ignore_index, CHUNK=CHUNK, num_warps=4)
    return dx
