"""layernorm_backward in the style of Triton's tutorial 05 (layer norm): `_layer_norm_bwd_dx_fused`
computes dx per row and adds the row's dy * xhat and dy into one of GROUP_SIZE_M partial rows
of dw and db, taking that row's spin lock (tl.atomic_cas) and using a Count flag to know
whether it is the first writer; `_layer_norm_bwd_dwdb` then sums the partial rows. Adapted:
each tensor's own strides (the tutorial shares one row stride), partial buffers in fp32 (the
tutorial's are of x's dtype), and a loop over the row for rows longer than one block (the
tutorial stops at 64 KB per row).

Expected failed checks: none
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _layer_norm_bwd_dx_fused(DX, DY, DW, DB, X, W, Mean, Rstd, Lock, stride_x, stride_xn, stride_dy, stride_dyn,
                             stride_dx, stride_w, stride_mean, stride_rstd, N,
                             GROUP_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_SIZE_N)
    X += row * stride_x
    DY += row * stride_dy
    DX += row * stride_dx
    lock_id = row % GROUP_SIZE_M
    Lock += lock_id
    Count = Lock + GROUP_SIZE_M
    DW = DW + lock_id * N
    DB = DB + lock_id * N
    mean = tl.load(Mean + row * stride_mean)
    rstd = tl.load(Rstd + row * stride_rstd)
    sum_xhat_wdy = tl.zeros([BLOCK_SIZE_N], dtype=tl.float32)
    sum_wdy = tl.zeros([BLOCK_SIZE_N], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE_N):
        mask = off + cols < N
        x = tl.load(X + (off + cols) * stride_xn, mask=mask, other=0).to(tl.float32)
        dy = tl.load(DY + (off + cols) * stride_dyn, mask=mask, other=0).to(tl.float32)
        w = tl.load(W + (off + cols) * stride_w, mask=mask, other=0).to(tl.float32)
        xhat = tl.where(mask, (x - mean) * rstd, 0.)
        wdy = tl.where(mask, w * dy, 0.)
        sum_xhat_wdy += xhat * wdy
        sum_wdy += wdy
    c1 = tl.sum(sum_xhat_wdy, axis=0) / N
    c2 = tl.sum(sum_wdy, axis=0) / N
    # Accumulate partial sums for dw/db under this group's lock
    while tl.atomic_cas(Lock, 0, 1) == 1:
        pass
    count = tl.load(Count)
    for off in range(0, N, BLOCK_SIZE_N):
        mask = off + cols < N
        x = tl.load(X + (off + cols) * stride_xn, mask=mask, other=0).to(tl.float32)
        dy = tl.load(DY + (off + cols) * stride_dyn, mask=mask, other=0).to(tl.float32)
        w = tl.load(W + (off + cols) * stride_w, mask=mask, other=0).to(tl.float32)
        xhat = tl.where(mask, (x - mean) * rstd, 0.)
        wdy = tl.where(mask, w * dy, 0.)
        dx = (wdy - (xhat * c1 + c2)) * rstd
        tl.store(DX + off + cols, dx.to(DX.dtype.element_ty), mask=mask)
        partial_dw = dy * xhat
        partial_db = dy
        if count != 0:
            partial_dw += tl.load(DW + off + cols, mask=mask)
            partial_db += tl.load(DB + off + cols, mask=mask)
        tl.store(DW + off + cols, partial_dw, mask=mask)
        tl.store(DB + off + cols, partial_db, mask=mask)
    if count == 0:
        tl.atomic_xchg(Count, 1)
    tl.debug_barrier()
    # Release the lock
    tl.atomic_xchg(Lock, 0)


@triton.jit
def _layer_norm_bwd_dwdb(DW, DB, FINAL_DW, FINAL_DB, M, N, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = pid * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    dw = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    db = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for i in range(0, M, BLOCK_SIZE_M):
        rows = i + tl.arange(0, BLOCK_SIZE_M)
        mask = (rows[:, None] < M) & (cols[None, :] < N)
        offs = rows[:, None] * N + cols[None, :]
        dw += tl.load(DW + offs, mask=mask, other=0.)
        db += tl.load(DB + offs, mask=mask, other=0.)
    sum_dw = tl.sum(dw, axis=0)
    sum_db = tl.sum(db, axis=0)
    tl.store(FINAL_DW + cols, sum_dw.to(FINAL_DW.dtype.element_ty), mask=cols < N)
    tl.store(FINAL_DB + cols, sum_db.to(FINAL_DB.dtype.element_ty), mask=cols < N)


def layernorm_backward(dy, x, w, mean, rstd):
    if x.dim() != 2 or dy.shape != x.shape or w.shape != (x.shape[1],) or mean.shape != (x.shape[0],) \
            or rstd.shape != (x.shape[0],):
        raise ValueError("shapes")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16) or dy.dtype != x.dtype or w.dtype != x.dtype \
            or mean.dtype != torch.float32 or rstd.dtype != torch.float32:
        raise TypeError("dtypes")
    if any(t.device != x.device for t in (dy, w, mean, rstd)) or any(t.requires_grad for t in (dy, x, w, mean, rstd)):
        raise ValueError("devices or requires_grad")
    M, N = x.shape
    # heuristics for amount of parallel reduction stream for DW/DB
    GROUP_SIZE_M = 64
    if N <= 8192:
        GROUP_SIZE_M = 96
    if N <= 4096:
        GROUP_SIZE_M = 128
    if N <= 1024:
        GROUP_SIZE_M = 256
    BLOCK_SIZE_N = min(triton.next_power_of_2(N), 4096)
    num_warps = min(max(BLOCK_SIZE_N // 256, 1), 8)
    locks = torch.zeros(2 * GROUP_SIZE_M, dtype=torch.int32, device=x.device)
    _dw = torch.zeros((GROUP_SIZE_M, N), dtype=torch.float32, device=x.device)
    _db = torch.zeros((GROUP_SIZE_M, N), dtype=torch.float32, device=x.device)
    dw = torch.empty((N,), dtype=w.dtype, device=w.device)
    db = torch.empty((N,), dtype=w.dtype, device=w.device)
    dx = torch.empty((M, N), dtype=x.dtype, device=x.device)
    _layer_norm_bwd_dx_fused[(M,)](dx, dy, _dw, _db, x, w, mean, rstd, locks, x.stride(0), x.stride(1), dy.stride(0),
                                   dy.stride(1), dx.stride(0), w.stride(0), mean.stride(0), rstd.stride(0), N,
                                   GROUP_SIZE_M=GROUP_SIZE_M, BLOCK_SIZE_N=BLOCK_SIZE_N, num_warps=num_warps)
    grid = lambda meta: (triton.cdiv(N, meta['BLOCK_SIZE_N']),)  # noqa: E731
    # the tutorial's 128 columns per program; wider under the CPU interpreter, where every
    # program costs a NumPy call per block
    cols = 128 if x.is_cuda else 2048
    _layer_norm_bwd_dwdb[grid](_dw, _db, dw, db, min(GROUP_SIZE_M, M), N, BLOCK_SIZE_M=32, BLOCK_SIZE_N=cols)
    return dx, dw, db
