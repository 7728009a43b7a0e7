"""Course reference solution for the `softmax_backward` assignment.

    dx = y * (g - sum(y * g, dim=-1, keepdim=True))

`y` (softmax probabilities) and `g` (upstream gradient dL/dy) are 2-D tensors of shape
(M rows, N columns), float32, float16 or bfloat16, each with its own row and column stride
(transposed views, step slices, expanded rows all work). Both are upcast to float32 before
they are multiplied; each row is reduced once in float32; the result is returned as a fresh
contiguous tensor of the input dtype.

Four kernels, chosen by the row length N (see `_plan`):

* `_softmax_bwd_rows_kernel` (short and medium rows): one pass. A program loads a
  [ROWS, BLOCK_N] tile (several whole rows), reduces each row and writes dx. Every element is
  read once from y, once from g and written once: 3 memory accesses per element.
* `_softmax_bwd_twopass_kernel` (rows of 16385 to 32768, enough of them to fill the GPU): one
  program per row, two passes over it. The first pass reads y and g and asks L2 to keep them
  (evict_last); the second reads them again, mostly from L2, and writes dx. The row length is
  a compile-time constant, so each row length compiles once (as torch.compile's kernel does;
  with a runtime length the same kernel was 15-20% slower on the H200, docs/benchmarks.md).
* `_softmax_bwd_looped_kernel` (longer rows, enough of them to fill the GPU): a persistent grid
  walks rows, two passes over each row in chunks of BLOCK_N. The second pass walks the chunks
  in reverse order, so the chunks it reads first are the ones the first pass read last and are
  still in L2. Between 3 and 5 DRAM accesses per element depending on how much of the row
  survives in L2.
* `_softmax_bwd_partial_dot_kernel` + `_softmax_bwd_split_out_kernel` (long rows, few of
  them): the row is split across programs. Kernel 1 writes one fp32 partial dot product per
  (row, segment); kernel 2 sums a row's partials and writes its segment of dx, visiting
  segments in the reverse of kernel 1's order (L2 reuse again). No program ever waits for
  another one, so this also runs under the Triton CPU interpreter, which runs programs one
  after another.

Under the CPU interpreter (TRITON_INTERPRET=1, CPU tensors) the block sizes are chosen for
the interpreter instead: each program is one numpy call per block, so few large blocks run
fastest there.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["softmax_backward"]

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

_INT32_MAX = 2**31 - 1


@triton.jit
def _softmax_bwd_rows_kernel(
    y_ptr, g_ptr, dx_ptr,
    M, N,
    stride_ym, stride_yn, stride_gm, stride_gn, stride_dxm,
    ROWS: tl.constexpr, BLOCK_N: tl.constexpr, INT64: tl.constexpr,
):
    """One pass: a [ROWS, BLOCK_N] tile holds ROWS whole rows (BLOCK_N >= N)."""
    pid = tl.program_id(0)
    rows = pid * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    if INT64:
        rows = rows.to(tl.int64)
        cols = cols.to(tl.int64)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    y = tl.load(y_ptr + rows[:, None] * stride_ym + cols[None, :] * stride_yn,
                mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + rows[:, None] * stride_gm + cols[None, :] * stride_gn,
                mask=mask, other=0.0).to(tl.float32)
    dot = tl.sum(y * g, axis=1)
    dx = y * (g - dot[:, None])
    tl.store(dx_ptr + rows[:, None] * stride_dxm + cols[None, :],
             dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_bwd_twopass_kernel(
    y_ptr, g_ptr, dx_ptr,
    stride_ym, stride_yn, stride_gm, stride_gn, stride_dxm,
    N: tl.constexpr, BLOCK_N: tl.constexpr, INT64: tl.constexpr,
):
    """Program r handles row r: pass 1 sums y*g over the row in BLOCK_N chunks (loads kept in
    L2, evict_last); pass 2 reads the row again (evict_first) and writes dx.

    N, the row length, is a compile-time constant: the loop trip counts and masks are then
    known to the compiler. Tiles are [1, BLOCK_N] and the accumulator is masked with
    tl.where, the form torch.compile (Inductor) emits and the form that was timed
    (scripts/tune_reference.py, `iv_row64`/`iv_strided`, docs/benchmarks.md).
    """
    row = tl.program_id(0).to(tl.int64)
    y_row = y_ptr + row * stride_ym
    g_row = g_ptr + row * stride_gm
    dx_row = dx_ptr + row * stride_dxm
    offs = tl.arange(0, BLOCK_N)[None, :]
    if INT64:
        offs = offs.to(tl.int64)
    acc = tl.full([1, BLOCK_N], 0, tl.float32)
    for start in tl.range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        y = tl.load(y_row + cols * stride_yn, mask, eviction_policy="evict_last", other=0.0).to(tl.float32)
        g = tl.load(g_row + cols * stride_gn, mask, eviction_policy="evict_last", other=0.0).to(tl.float32)
        acc = tl.where(mask, acc + y * g, acc)
    dot = tl.sum(acc, 1)[:, None]
    for start in tl.range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        y = tl.load(y_row + cols * stride_yn, mask, eviction_policy="evict_first", other=0.0).to(tl.float32)
        g = tl.load(g_row + cols * stride_gn, mask, eviction_policy="evict_first", other=0.0).to(tl.float32)
        tl.store(dx_row + cols, (y * (g - dot)).to(dx_ptr.dtype.element_ty), mask)


@triton.jit
def _softmax_bwd_looped_kernel(
    y_ptr, g_ptr, dx_ptr,
    M, N,
    stride_ym, stride_yn, stride_gm, stride_gn, stride_dxm,
    BLOCK_N: tl.constexpr, INT64: tl.constexpr, STAGES: tl.constexpr,
    KEEP: tl.constexpr, DROP: tl.constexpr,
):
    """Two passes over each row in BLOCK_N chunks; programs stride over rows (persistent).

    STAGES > 1 software-pipelines the chunk loads (asynchronous copies into shared memory).
    KEEP / DROP are L2 eviction policies ("evict_last" / "evict_first", or "" for none): the
    first pass's loads ask L2 to keep the row for the second pass, whose loads and stores ask
    to be evicted first.
    """
    pid = tl.program_id(0).to(tl.int64)  # int64 row index: scalar, costs nothing here
    nprog = tl.num_programs(0)
    offs = tl.arange(0, BLOCK_N)
    n_chunks = tl.cdiv(N, BLOCK_N)
    for row in range(pid, M, nprog):
        y_row = y_ptr + row * stride_ym
        g_row = g_ptr + row * stride_gm
        dx_row = dx_ptr + row * stride_dxm
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for c in tl.range(0, n_chunks, num_stages=STAGES):
            cols = c * BLOCK_N + offs
            if INT64:
                cols = cols.to(tl.int64)
            mask = cols < N
            y = tl.load(y_row + cols * stride_yn, mask=mask, other=0.0, eviction_policy=KEEP).to(tl.float32)
            g = tl.load(g_row + cols * stride_gn, mask=mask, other=0.0, eviction_policy=KEEP).to(tl.float32)
            acc += y * g
        dot = tl.sum(acc, axis=0)
        for c in tl.range(0, n_chunks, num_stages=STAGES):
            cols = (n_chunks - 1 - c) * BLOCK_N + offs  # reverse order: L2 hits first
            if INT64:
                cols = cols.to(tl.int64)
            mask = cols < N
            y = tl.load(y_row + cols * stride_yn, mask=mask, other=0.0, eviction_policy=DROP).to(tl.float32)
            g = tl.load(g_row + cols * stride_gn, mask=mask, other=0.0, eviction_policy=DROP).to(tl.float32)
            tl.store(dx_row + cols, (y * (g - dot)).to(dx_ptr.dtype.element_ty), mask=mask,
                     eviction_policy=DROP)


@triton.jit
def _softmax_bwd_partial_dot_kernel(
    y_ptr, g_ptr, part_ptr,
    N, n_seg,
    stride_ym, stride_yn, stride_gm, stride_gn,
    SEG: tl.constexpr, BLOCK_N: tl.constexpr, INT64: tl.constexpr, STAGES: tl.constexpr,
    KEEP: tl.constexpr,
):
    """Program p = row * n_seg + seg writes sum(y*g) over columns [seg*SEG, (seg+1)*SEG)."""
    pid = tl.program_id(0)
    row = pid // n_seg
    seg = pid % n_seg
    if INT64:
        row = row.to(tl.int64)
        seg = seg.to(tl.int64)
    offs = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for c in tl.range(0, SEG // BLOCK_N, num_stages=STAGES):
        cols = seg * SEG + c * BLOCK_N + offs
        mask = cols < N
        y = tl.load(y_ptr + row * stride_ym + cols * stride_yn, mask=mask, other=0.0,
                    eviction_policy=KEEP).to(tl.float32)
        g = tl.load(g_ptr + row * stride_gm + cols * stride_gn, mask=mask, other=0.0,
                    eviction_policy=KEEP).to(tl.float32)
        acc += y * g
    tl.store(part_ptr + pid, tl.sum(acc, axis=0))


@triton.jit
def _softmax_bwd_split_out_kernel(
    y_ptr, g_ptr, dx_ptr, part_ptr,
    N, n_seg, n_prog,
    stride_ym, stride_yn, stride_gm, stride_gn, stride_dxm,
    SEG: tl.constexpr, BLOCK_N: tl.constexpr, SEG_P2: tl.constexpr, INT64: tl.constexpr,
    STAGES: tl.constexpr, DROP: tl.constexpr,
):
    """Writes dx for one (row, segment); visits them in the reverse of kernel 1's order."""
    pid = n_prog - 1 - tl.program_id(0)
    row = pid // n_seg
    seg = pid % n_seg
    if INT64:
        row = row.to(tl.int64)
        seg = seg.to(tl.int64)
    s = tl.arange(0, SEG_P2)
    parts = tl.load(part_ptr + row * n_seg + s, mask=s < n_seg, other=0.0)
    dot = tl.sum(parts, axis=0)
    offs = tl.arange(0, BLOCK_N)
    for c in tl.range(0, SEG // BLOCK_N, num_stages=STAGES):
        cols = seg * SEG + (SEG // BLOCK_N - 1 - c) * BLOCK_N + offs
        mask = cols < N
        y = tl.load(y_ptr + row * stride_ym + cols * stride_yn, mask=mask, other=0.0,
                    eviction_policy=DROP).to(tl.float32)
        g = tl.load(g_ptr + row * stride_gm + cols * stride_gn, mask=mask, other=0.0,
                    eviction_policy=DROP).to(tl.float32)
        tl.store(dx_ptr + row * stride_dxm + cols, (y * (g - dot)).to(dx_ptr.dtype.element_ty),
                 mask=mask, eviction_policy=DROP)


# --------------------------------------------------------------------------------------
# Launch heuristics, from sweeps on an NVIDIA H200 (scripts/gpu_bench.py, docs/benchmarks.md).
# Rows up to 16384 long: the one-pass kernel. A table per element size in bytes; each entry:
# (max BLOCK_N, elements per program tile, num_warps); ROWS = tile // BLOCK_N whole rows per
# program. 2-byte inputs run the same tiles with 8 warps where the 2026-11-29 tuning call
# (scripts/tune_reference.py) measured them 1.5 to 2.5% faster (65536x256, 4096x4096).
_GPU_ROWS_TABLE = {
    # max_block_n, tile_elems, num_warps
    4: (
        (256, 2048, 4),
        (1024, 4096, 4),
        (4096, 4096, 4),
        (8192, 8192, 8),
        (16384, 16384, 16),
    ),
    2: (
        (256, 2048, 8),
        (1024, 4096, 4),
        (4096, 4096, 8),
        (8192, 8192, 8),
        (16384, 16384, 16),
    ),
}
# Longer rows: a plan per (element size in bytes, row-length bucket 32768 or 131072 = longer).
# "grid_per_sm" sizes the persistent grid of the looped kernel; "EVICT" turns on the L2
# eviction hints (keep the row for the second pass). The sweep that chose these is in
# docs/benchmarks/ (BEGIN/END TUNED is rewritten by `scripts/gpu_bench.py --tune`). The 32768
# entries (the two-pass kernel with torch.compile's block sizes: the whole fp32 row, or half a
# 2-byte row, over 32 warps) come from scripts/tune_reference.py (2026-11-29).
# BEGIN TUNED
_GPU_LONG_PLANS = {
    (4, 32768): {'kind': 'twopass', 'BLOCK_N': 32768, 'num_warps': 32},
    (2, 32768): {'kind': 'twopass', 'BLOCK_N': 16384, 'num_warps': 32},
    (4, 131072): {'kind': 'looped', 'BLOCK_N': 8192, 'num_warps': 16, 'STAGES': 3, 'EVICT': True, 'grid_per_sm': 2},
    (2, 131072): {'kind': 'looped', 'BLOCK_N': 8192, 'num_warps': 16, 'STAGES': 3, 'EVICT': True, 'grid_per_sm': 2},
}
# END TUNED
# Few long rows (fewer than the GPU has multiprocessors): split each row over programs.
_GPU_SPLIT_PLAN = {"kind": "split", "SEG": 8192, "BLOCK_N": 4096, "num_warps": 8, "STAGES": 3, "EVICT": True}
_INTERP_TILE = 1 << 18  # elements per program under the CPU interpreter (numpy blocks)


def _sm_count(device: torch.device) -> int:
    return torch.cuda.get_device_properties(device).multi_processor_count


def _needs_int64(t: torch.Tensor) -> bool:
    m, n = t.shape
    return (m - 1) * abs(t.stride(0)) + (n - 1) * abs(t.stride(1)) > _INT32_MAX


def _plan(m: int, n: int, elem_size: int, device: torch.device) -> dict:
    """Pick a kernel and its block sizes for an (m, n) problem. Returns a dict of launch args."""
    block_n = triton.next_power_of_2(n)
    if device.type != "cuda":  # Triton CPU interpreter: fewest, largest numpy blocks
        if block_n <= _INTERP_TILE:
            rows = min(max(1, _INTERP_TILE // block_n), triton.next_power_of_2(m))
            return {"kind": "rows", "ROWS": rows, "BLOCK_N": block_n, "num_warps": 4}
        seg = _INTERP_TILE
        return {"kind": "split", "SEG": seg, "BLOCK_N": seg, "num_warps": 4}
    for max_block, tile, warps in _GPU_ROWS_TABLE.get(elem_size, _GPU_ROWS_TABLE[4]):
        if block_n <= max_block:
            rows = min(max(1, tile // block_n), triton.next_power_of_2(m))
            return {"kind": "rows", "ROWS": rows, "BLOCK_N": block_n, "num_warps": warps}
    sms = _sm_count(device)
    if m < sms:
        return dict(_GPU_SPLIT_PLAN)
    bucket = 32768 if block_n <= 32768 else 131072
    plan = dict(_GPU_LONG_PLANS.get((elem_size, bucket)) or _GPU_LONG_PLANS[(4, bucket)])
    if plan["kind"] == "rows":
        plan["BLOCK_N"] = block_n
    if plan["kind"] == "twopass":
        plan["BLOCK_N"] = min(plan["BLOCK_N"], block_n)
    if plan["kind"] == "looped":
        plan["grid"] = min(m, sms * plan.pop("grid_per_sm", 2))
    return plan


def _validate(y: object, g: object) -> None:
    for name, t in (("y", y), ("g", g)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"softmax_backward: {name} must be a torch.Tensor, got {type(t).__name__}")
    for name, t in (("y", y), ("g", g)):
        if t.dim() != 2:
            raise ValueError(f"softmax_backward: {name} must be 2-D (rows, columns), got {t.dim()}-D "
                             f"with shape {tuple(t.shape)}")
        if t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"softmax_backward: {name} has dtype {t.dtype}; supported: "
                            "torch.float32, torch.float16, torch.bfloat16")
        if t.requires_grad:
            raise ValueError(f"softmax_backward: {name} requires grad; this is an explicit VJP, "
                             "pass detached tensors (tensor.detach())")
    if y.shape != g.shape:
        raise ValueError(f"softmax_backward: shape mismatch, y {tuple(y.shape)} vs g {tuple(g.shape)}")
    if y.dtype != g.dtype:
        raise TypeError(f"softmax_backward: dtype mismatch, y {y.dtype} vs g {g.dtype}")
    if y.device != g.device:
        raise ValueError(f"softmax_backward: device mismatch, y on {y.device} vs g on {g.device}")


def softmax_backward(y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """dx = y * (g - sum(y*g, dim=-1, keepdim=True)) for 2-D y, g of shape (M, N).

    y, g: same shape, dtype (float32/float16/bfloat16) and device, any strides, not requiring
    grad. Returns a new contiguous (M, N) tensor of the input dtype. Raises TypeError for
    non-tensors and bad or mismatched dtypes, ValueError for other mismatches.
    """
    _validate(y, g)
    m, n = y.shape
    dx = torch.empty((m, n), dtype=y.dtype, device=y.device)
    if m == 0 or n == 0:
        return dx
    _launch(y, g, dx, _plan(m, n, y.element_size(), y.device))
    return dx


def _launch(y: torch.Tensor, g: torch.Tensor, dx: torch.Tensor, plan: dict) -> None:
    """Launch the kernel(s) that `plan` names (see `_plan`) writing dx (contiguous, M x N)."""
    m, n = y.shape
    int64 = _needs_int64(y) or _needs_int64(g) or _needs_int64(dx)
    strides = (y.stride(0), y.stride(1), g.stride(0), g.stride(1))
    keep, drop = ("evict_last", "evict_first") if plan.get("EVICT") else ("", "")
    if plan["kind"] == "rows":
        grid = (triton.cdiv(m, plan["ROWS"]),)
        _softmax_bwd_rows_kernel[grid](
            y, g, dx, m, n, *strides, dx.stride(0),
            ROWS=plan["ROWS"], BLOCK_N=plan["BLOCK_N"], INT64=int64, num_warps=plan["num_warps"])
    elif plan["kind"] == "twopass":
        _softmax_bwd_twopass_kernel[(m,)](
            y, g, dx, *strides, dx.stride(0),
            N=n, BLOCK_N=plan["BLOCK_N"], INT64=int64, num_warps=plan["num_warps"])
    elif plan["kind"] == "looped":
        _softmax_bwd_looped_kernel[(plan["grid"],)](
            y, g, dx, m, n, *strides, dx.stride(0),
            BLOCK_N=plan["BLOCK_N"], INT64=int64, STAGES=plan.get("STAGES", 1),
            KEEP=keep, DROP=drop, num_warps=plan["num_warps"])
    else:
        seg = min(plan["SEG"], triton.next_power_of_2(n))
        block_n = min(plan["BLOCK_N"], seg)
        n_seg = triton.cdiv(n, seg)
        n_prog = m * n_seg
        part = torch.empty(n_prog, dtype=torch.float32, device=y.device)
        _softmax_bwd_partial_dot_kernel[(n_prog,)](
            y, g, part, n, n_seg, *strides,
            SEG=seg, BLOCK_N=block_n, INT64=int64, STAGES=plan.get("STAGES", 1), KEEP=keep,
            num_warps=plan["num_warps"])
        _softmax_bwd_split_out_kernel[(n_prog,)](
            y, g, dx, part, n, n_seg, n_prog, *strides, dx.stride(0),
            SEG=seg, BLOCK_N=block_n, SEG_P2=triton.next_power_of_2(n_seg), INT64=int64,
            STAGES=plan.get("STAGES", 1), DROP=drop, num_warps=plan["num_warps"])
