"""softmax_cross_entropy_backward with a fast path for three-class batches of 256 rows or more (the
batch of a small classifier's training step) whose 4th lane is not masked: every row reads the
next row's first logit into its softmax, and the last row the memory after x (NaN in the
grader's guards). Exact on every unit check's inputs (none has three classes and 256 rows);
the training step of tests' spiral classifier reaches it at once.

Expected failed checks: training_step

Expected hint: spiral data
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["softmax_cross_entropy_backward"]

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

_INT32_MAX = 2**31 - 1


@triton.jit
def _count_targets_kernel(t_ptr, counts_ptr, M, C, stride_t, ignore_index, n_parts, BLOCK_T: tl.constexpr):
    """Program p counts targets [p * BLOCK_T, (p + 1) * BLOCK_T): counts[p] = valid ones,
    counts[n_parts + p] = valid ones outside [0, C)."""
    pid = tl.program_id(0)
    offs = pid * BLOCK_T + tl.arange(0, BLOCK_T)
    in_bounds = offs < M
    t = tl.load(t_ptr + offs.to(tl.int64) * stride_t, mask=in_bounds, other=0)
    valid = in_bounds & (t != ignore_index)
    bad = valid & ((t < 0) | (t >= C))
    tl.store(counts_ptr + pid, tl.sum(valid.to(tl.int32), axis=0))
    tl.store(counts_ptr + n_parts + pid, tl.sum(bad.to(tl.int32), axis=0))


@triton.jit
def _mean_factor(grad_ptr, counts_ptr, n_parts, PARTS: tl.constexpr):
    """grad / n_valid as an fp32 scalar (0 when no target is valid: then every row is ignored)."""
    parts = tl.arange(0, PARTS)
    n_valid = tl.sum(tl.load(counts_ptr + parts, mask=parts < n_parts, other=0), axis=0)
    grad = tl.load(grad_ptr).to(tl.float32)
    return tl.where(n_valid > 0, grad / tl.maximum(n_valid, 1).to(tl.float32), 0.0)


@triton.jit
def _xent_bwd_rows_kernel(
    x_ptr, t_ptr, grad_ptr, counts_ptr, dx_ptr,
    M, C, stride_xm, stride_xc, stride_t, stride_dxm, ignore_index, n_parts,
    ROWS: tl.constexpr, BLOCK_C: tl.constexpr, PARTS: tl.constexpr, INT64: tl.constexpr,
):
    """One pass: a [ROWS, BLOCK_C] tile holds ROWS whole rows (BLOCK_C >= C)."""
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_C)
    if INT64:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    row_ok = rows < M
    factor = _mean_factor(grad_ptr, counts_ptr, n_parts, PARTS)
    t = tl.load(t_ptr + rows * stride_t, mask=row_ok, other=ignore_index)
    row_scale = tl.where(t != ignore_index, factor, 0.0)
    mask = row_ok[:, None] & (cols < C)[None, :]
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xc, mask=mask,
                other=float("-inf")).to(tl.float32)
    row_max = tl.where(row_ok, tl.max(x, axis=1), 0.0)  # rows past M: all -inf, keep them finite
    e = tl.exp(x - row_max[:, None])
    total = tl.where(row_ok, tl.sum(e, axis=1), 1.0)  # >= 1 on real rows (the max's own term)
    coef = row_scale / total
    dx = e * coef[:, None] - tl.where(cols[None, :] == t[:, None], row_scale[:, None], 0.0)
    tl.store(dx_ptr + rows[:, None] * stride_dxm + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _three_class_rows_kernel(x_ptr, t_ptr, grad_ptr, counts_ptr, dx_ptr, M, stride_xm, stride_xc, stride_t,
                             stride_dxm, ignore_index, n_parts, ROWS: tl.constexpr, PARTS: tl.constexpr):
    """The fast path for three-class batches: a [ROWS, 4] tile per program, softmax per row."""
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, 4)
    in_rows = rows < M
    # the mistake: the 4th lane of a 3-class row is not masked (it reads the next row's first
    # logit, and past the last row whatever lies after x)
    x = tl.load(x_ptr + rows[:, None] * stride_xm + cols[None, :] * stride_xc, mask=in_rows[:, None],
                other=0.0).to(tl.float32)
    e = tl.exp(x - tl.max(x, 1)[:, None])
    p = e / tl.sum(e, 1)[:, None]
    t = tl.load(t_ptr + rows * stride_t, mask=in_rows, other=ignore_index)
    scale = _mean_factor(grad_ptr, counts_ptr, n_parts, PARTS)
    dx = (p - (cols[None, :] == t[:, None]).to(tl.float32)) * scale
    dx = tl.where((t != ignore_index)[:, None], dx, 0.0)
    tl.store(dx_ptr + rows[:, None] * stride_dxm + cols[None, :], dx.to(dx_ptr.dtype.element_ty),
             mask=in_rows[:, None] & (cols[None, :] < 3))


@triton.jit
def _xent_bwd_looped_kernel(
    x_ptr, t_ptr, grad_ptr, counts_ptr, dx_ptr,
    C, stride_xm, stride_xc, stride_t, stride_dxm, ignore_index, n_parts,
    BLOCK_C: tl.constexpr, PARTS: tl.constexpr, INT64: tl.constexpr, KEEP: tl.constexpr, DROP: tl.constexpr,
):
    """Program r handles row r in BLOCK_C chunks: pass 1 an online max and sum-exp per lane
    (loads kept in L2: KEEP), pass 2 in reverse chunk order writes dx (DROP). KEEP / DROP are
    L2 eviction policies ("evict_last" / "evict_first", or "" for none)."""
    row = tl.program_id(0).to(tl.int64)
    factor = _mean_factor(grad_ptr, counts_ptr, n_parts, PARTS)
    t = tl.load(t_ptr + row * stride_t)
    row_scale = tl.where(t != ignore_index, factor, 0.0)
    x_row = x_ptr + row * stride_xm
    dx_row = dx_ptr + row * stride_dxm
    offs = tl.arange(0, BLOCK_C)
    if INT64:
        offs = offs.to(tl.int64)
    n_chunks = tl.cdiv(C, BLOCK_C)
    # Running max and sum per lane; the max starts finite so that a lane whose loads are all
    # masked (-inf) never computes -inf - (-inf).
    lane_max = tl.full([BLOCK_C], -3.0e38, tl.float32)
    lane_sum = tl.zeros([BLOCK_C], dtype=tl.float32)
    for chunk in range(n_chunks):
        cols = chunk * BLOCK_C + offs
        x = tl.load(x_row + cols * stride_xc, mask=cols < C, other=float("-inf"),
                    eviction_policy=KEEP).to(tl.float32)
        # exp(-|x - max|): exp(x - max) when x <= max (the new term), else exp(max - x), the
        # factor that rescales the lane's sum to the new max x (whose own term is 1).
        e = tl.exp(-tl.abs(x - lane_max))
        lane_sum = tl.where(x > lane_max, lane_sum * e + 1.0, lane_sum + e)
        lane_max = tl.maximum(lane_max, x)
    row_max = tl.max(lane_max, axis=0)
    total = tl.sum(lane_sum * tl.exp(lane_max - row_max), axis=0)
    coef = row_scale / total
    for chunk in range(n_chunks):
        cols = (n_chunks - 1 - chunk) * BLOCK_C + offs  # reverse order: L2 hits first
        in_row = cols < C
        x = tl.load(x_row + cols * stride_xc, mask=in_row, other=float("-inf"),
                    eviction_policy=DROP).to(tl.float32)
        dx = tl.exp(x - row_max) * coef - tl.where(cols == t, row_scale, 0.0)
        tl.store(dx_row + cols, dx.to(dx_ptr.dtype.element_ty), mask=in_row, eviction_policy=DROP)


# --------------------------------------------------------------------------------------
# Launch heuristics for a GPU (H100/H200 class). Not tuned on hardware yet: the block sizes
# follow the softmax_backward reference's H200 sweeps for the same row lengths (one read
# stream instead of two). Rows up to 32768 long: the one-pass kernel; each entry is
# (max BLOCK_C, elements per program tile, num_warps), ROWS = tile // BLOCK_C whole rows per
# program (up to 32 fp32 values of x per thread).
_GPU_ROWS_TABLE = (
    (256, 4096, 4),
    (1024, 4096, 4),
    (4096, 4096, 8),
    (8192, 8192, 8),
    (16384, 16384, 16),
    (32768, 32768, 32),
)
# Longer rows: the two-pass looped kernel, chunks of 16 KiB of x per program and L2 hints.
_GPU_LOOPED_PLAN = {4: {"BLOCK_C": 4096, "num_warps": 8}, 2: {"BLOCK_C": 8192, "num_warps": 8}}
_GPU_COUNT_BLOCK = 1024  # targets per program of the count kernel
_INTERP_TILE = 1 << 18  # elements per program under the CPU interpreter (numpy blocks)
_INTERP_CHUNK = 1 << 16  # chunk of the looped kernel under the interpreter (rows over 2^18)


def _plan(m: int, c: int, elem_size: int, device: torch.device) -> dict:
    """Pick the main kernel and its block sizes for an (m, c) problem; a dict of launch args."""
    block_c = triton.next_power_of_2(c)
    if device.type != "cuda":  # Triton CPU interpreter: fewest, largest numpy blocks
        if block_c <= _INTERP_TILE:
            rows = min(max(1, _INTERP_TILE // block_c), triton.next_power_of_2(m))
            return {"kind": "rows", "ROWS": rows, "BLOCK_C": block_c, "num_warps": 4}
        return {"kind": "looped", "BLOCK_C": _INTERP_CHUNK, "num_warps": 4, "EVICT": False}
    for max_block, tile, warps in _GPU_ROWS_TABLE:
        if block_c <= max_block:
            rows = min(max(1, tile // block_c), triton.next_power_of_2(m))
            return {"kind": "rows", "ROWS": rows, "BLOCK_C": block_c, "num_warps": warps}
    looped = _GPU_LOOPED_PLAN.get(elem_size, _GPU_LOOPED_PLAN[4])
    return {"kind": "looped", "BLOCK_C": looped["BLOCK_C"], "num_warps": looped["num_warps"], "EVICT": True}


def _needs_int64(x: torch.Tensor, t: torch.Tensor) -> bool:
    m, c = x.shape
    span_x = (m - 1) * abs(x.stride(0)) + (c - 1) * abs(x.stride(1))
    return max(span_x, m * c, (m - 1) * abs(t.stride(0))) > _INT32_MAX


def _validate(x: object, t: object, grad: object, ignore_index: object) -> None:
    for name, value in (("x", x), ("t", t), ("grad", grad)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"softmax_cross_entropy_backward: {name} must be a torch.Tensor, got {type(value).__name__}")
    if not isinstance(ignore_index, int) or isinstance(ignore_index, bool):
        raise TypeError(f"softmax_cross_entropy_backward: ignore_index must be an int, got {type(ignore_index).__name__}")
    if x.dim() != 2:
        raise ValueError(f"softmax_cross_entropy_backward: x must be 2-D (rows, classes), got shape {tuple(x.shape)}")
    if x.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"softmax_cross_entropy_backward: x has dtype {x.dtype}; supported: torch.float32, "
                        "torch.float16, torch.bfloat16")
    if t.dtype != torch.int64:
        raise TypeError(f"softmax_cross_entropy_backward: t must hold int64 class indices, got {t.dtype}")
    if t.dim() != 1 or t.shape[0] != x.shape[0]:
        raise ValueError(f"softmax_cross_entropy_backward: t must have shape ({x.shape[0]},) for x of shape "
                         f"{tuple(x.shape)}, got {tuple(t.shape)}")
    if grad.dtype != torch.float32 or grad.dim() != 0:
        raise ValueError(f"softmax_cross_entropy_backward: grad must be a 0-d float32 tensor (the gradient of the "
                         f"mean loss), got shape {tuple(grad.shape)} {grad.dtype}")
    if t.device != x.device or grad.device != x.device:
        raise ValueError(f"softmax_cross_entropy_backward: device mismatch, x on {x.device}, t on {t.device}, "
                         f"grad on {grad.device}")
    for name, value in (("x", x), ("grad", grad)):
        if value.requires_grad:
            raise ValueError(f"softmax_cross_entropy_backward: {name} requires grad; this is an explicit backward "
                             "function, pass detached tensors (tensor.detach())")


def _out_of_range(t: torch.Tensor, c: int, ignore_index: int) -> int:
    """Targets that are neither ignore_index nor in [0, c), counted by torch (empty inputs only)."""
    valid = t != ignore_index
    return int((valid & ((t < 0) | (t >= c))).sum())


def softmax_cross_entropy_backward(x: torch.Tensor, t: torch.Tensor, grad: torch.Tensor,
                                   ignore_index: int = -100) -> torch.Tensor:
    """dlogits of the mean softmax cross-entropy: (softmax(x) - onehot(t)) * grad / n_valid.

    Args:
        x: logits (M, C), float32/float16/bfloat16, any strides, not requiring grad.
        t: int64 targets (M,), any stride, each in [0, C) or equal to ignore_index.
        grad: 0-d float32 tensor on x's device, dL/dloss of loss = F.cross_entropy(x, t,
            ignore_index=ignore_index, reduction="mean"); not requiring grad.
        ignore_index: rows whose target equals it get dx = 0 and are not counted (default -100).

    Returns:
        A new contiguous (M, C) tensor of x's dtype on x's device.

    Raises:
        TypeError: a non-tensor argument, an unsupported dtype of x, t not int64, or an
            ignore_index that is not an int.
        ValueError: mismatched shapes or devices, grad not a 0-d float32 tensor, x or grad
            requiring grad, or a target that is neither ignore_index nor in [0, C).
    """
    _validate(x, t, grad, ignore_index)
    m, c = x.shape
    dx = torch.empty((m, c), dtype=x.dtype, device=x.device)
    if m == 0 or c == 0:
        if _out_of_range(t, c, ignore_index):
            raise ValueError(f"softmax_cross_entropy_backward: a target is neither ignore_index ({ignore_index}) "
                             f"nor a class in [0, {c})")
        return dx
    counts, n_parts = _launch(x, t, grad, dx, ignore_index, _plan(m, c, x.element_size(), x.device))
    if x.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return dx  # no copy to the host inside a CUDA graph capture; the kernels never read x[t]
    if int(counts[n_parts:].cpu().sum()):  # waits for the kernels, which are already queued
        raise ValueError(f"softmax_cross_entropy_backward: a target is neither ignore_index ({ignore_index}) nor a "
                         f"class in [0, {c})")
    return dx


def _launch(x: torch.Tensor, t: torch.Tensor, grad: torch.Tensor, dx: torch.Tensor, ignore_index: int,
            plan: dict) -> tuple[torch.Tensor, int]:
    """Launch the count kernel and the main kernel that ``plan`` names (see `_plan`), writing dx
    (contiguous, M x C).

    Returns:
        (counts, n_parts): the int32 partial counts (valid targets of each block of targets,
        then out-of-range targets of each block) and the number of blocks.
    """
    m, c = x.shape
    on_gpu = x.device.type == "cuda"
    block_t = _GPU_COUNT_BLOCK if on_gpu else min(triton.next_power_of_2(m), _INTERP_CHUNK)
    n_parts = triton.cdiv(m, block_t)
    counts = torch.empty(2 * n_parts, dtype=torch.int32, device=x.device)
    _count_targets_kernel[(n_parts,)](t, counts, m, c, t.stride(0), ignore_index, n_parts, BLOCK_T=block_t,
                                      num_warps=4)
    common = {"PARTS": triton.next_power_of_2(n_parts), "INT64": _needs_int64(x, t), "num_warps": plan["num_warps"]}
    strides = (x.stride(0), x.stride(1), t.stride(0), dx.stride(0))
    if c == 3 and m >= 256:  # a batch of a three-class classifier: the fast path
        _three_class_rows_kernel[(triton.cdiv(m, 64),)](
            x, t, grad, counts, dx, m, x.stride(0), x.stride(1), t.stride(0), dx.stride(0), ignore_index, n_parts,
            ROWS=64, PARTS=common["PARTS"])
    elif plan["kind"] == "rows":
        _xent_bwd_rows_kernel[(triton.cdiv(m, plan["ROWS"]),)](
            x, t, grad, counts, dx, m, c, *strides, ignore_index, n_parts,
            ROWS=plan["ROWS"], BLOCK_C=plan["BLOCK_C"], **common)
    else:
        keep, drop = ("evict_last", "evict_first") if plan.get("EVICT") else ("", "")
        _xent_bwd_looped_kernel[(m,)](
            x, t, grad, counts, dx, c, *strides, ignore_index, n_parts,
            BLOCK_C=plan["BLOCK_C"], KEEP=keep, DROP=drop, **common)
    return counts, n_parts
