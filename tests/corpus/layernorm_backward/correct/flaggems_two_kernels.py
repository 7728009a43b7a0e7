"""layernorm_backward in the style of FlagGems' layer_norm backward: two kernels, one for dx (a
block of rows per program, two passes over the columns) and one for dw and db (a block of
columns per program, looping over every row), with FlagGems' masks written as it writes them,
``mask = row_mask and col_mask`` between two block tensors. The GPU compiler makes that an
element-wise and (with a deprecation warning); the CPU interpreter does the same here.

Expected failed checks: none
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _dx_kernel(dY, X, W, Mean, Rstd, dX, M, N, BLOCK_ROW_SIZE: tl.constexpr, BLOCK_COL_SIZE: tl.constexpr):
    pid = tl.program_id(0) * BLOCK_ROW_SIZE + tl.arange(0, BLOCK_ROW_SIZE)[:, None]
    row_mask = pid < M
    dY += pid * N
    X += pid * N
    dX += pid * N
    Mean += pid
    Rstd += pid
    mean = tl.load(Mean, mask=row_mask, other=0.0).to(tl.float32)
    rstd = tl.load(Rstd, mask=row_mask, other=0.0).to(tl.float32)
    dx_part2 = tl.zeros([BLOCK_ROW_SIZE, BLOCK_COL_SIZE], dtype=tl.float32)
    dx_part3 = tl.zeros([BLOCK_ROW_SIZE, BLOCK_COL_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_COL_SIZE):
        cols = off + tl.arange(0, BLOCK_COL_SIZE)
        col_mask = cols[None, :] < N
        mask = row_mask and col_mask
        dy = tl.load(dY + cols[None, :], mask, other=0.0).to(tl.float32)
        x = tl.load(X + cols[None, :], mask, other=0.0).to(tl.float32)
        x = tl.where(mask, x - mean, 0.0)
        x_hat = x * rstd
        w = tl.load(W + cols, mask=cols < N, other=0.0).to(tl.float32)
        dx_hat = dy * w
        dx_part2 += dx_hat
        dx_part3 += dx_hat * x_hat
    dx_2 = tl.sum(dx_part2, axis=1)[:, None]
    dx_3 = tl.sum(dx_part3, axis=1)[:, None]
    for off in range(0, N, BLOCK_COL_SIZE):
        cols = off + tl.arange(0, BLOCK_COL_SIZE)
        col_mask = cols[None, :] < N
        mask = row_mask and col_mask
        dy = tl.load(dY + cols[None, :], mask, other=0.0).to(tl.float32)
        x = tl.load(X + cols[None, :], mask, other=0.0).to(tl.float32)
        w = tl.load(W + cols, mask=cols < N, other=0.0).to(tl.float32)
        x = tl.where(mask, x - mean, 0.0)
        x_hat = x * rstd
        dx_hat = dy * w
        dx = rstd * (dx_hat - (dx_2 + x_hat * dx_3) / N)
        tl.store(dX + cols, dx.to(dX.dtype.element_ty), mask=mask)


@triton.jit
def _dwdb_kernel(dY, X, Mean, Rstd, dW, dB, M, N, BLOCK_ROW_SIZE: tl.constexpr, BLOCK_COL_SIZE: tl.constexpr):
    pid = tl.program_id(0) * BLOCK_COL_SIZE + tl.arange(0, BLOCK_COL_SIZE)[None, :]
    col_mask = pid < N
    dY += pid
    X += pid
    accW = tl.zeros([BLOCK_ROW_SIZE, BLOCK_COL_SIZE], dtype=tl.float32)
    accB = tl.zeros([BLOCK_ROW_SIZE, BLOCK_COL_SIZE], dtype=tl.float32)
    for off in range(0, M, BLOCK_ROW_SIZE):
        rows = off + tl.arange(0, BLOCK_ROW_SIZE)
        row_mask = rows[:, None] < M
        mask = row_mask and col_mask
        dy = tl.load(dY + rows[:, None] * N, mask, other=0.0).to(tl.float32)
        x = tl.load(X + rows[:, None] * N, mask, other=0.0).to(tl.float32)
        mean = tl.load(Mean + rows, mask=rows < M, other=0.0)[:, None].to(tl.float32)
        rstd = tl.load(Rstd + rows, mask=rows < M, other=0.0)[:, None].to(tl.float32)
        x = tl.where(mask, x - mean, 0.0)
        accW += dy * x * rstd
        accB += dy
    dw = tl.sum(accW, axis=0)
    db = tl.sum(accB, axis=0)
    tl.store(dW + pid, dw[None, :].to(dW.dtype.element_ty), mask=col_mask)
    tl.store(dB + pid, db[None, :].to(dB.dtype.element_ty), mask=col_mask)


def layernorm_backward(dy, x, w, mean, rstd):
    M, N = x.shape if x.dim() == 2 else (None, None)
    if M is None or dy.shape != x.shape or w.shape != (N,) or mean.shape != (M,) or rstd.shape != (M,):
        raise ValueError("expected dy, x (M, N), w (N,), mean, rstd (M,)")
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16) or dy.dtype != x.dtype or w.dtype != x.dtype:
        raise TypeError("dy, x, w must share a float dtype")
    if mean.dtype != torch.float32 or rstd.dtype != torch.float32:
        raise TypeError("mean and rstd must be float32")
    if len({t.device for t in (dy, x, w, mean, rstd)}) != 1:
        raise ValueError("one device")
    if any(t.requires_grad for t in (dy, x, w, mean, rstd)):
        raise ValueError("no requires_grad")
    # FlagGems makes its inputs contiguous and indexes them with N.
    dy, x, w, mean, rstd = (t.contiguous() for t in (dy, x, w, mean, rstd))
    dx = torch.empty_like(x)
    dw = torch.empty((N,), dtype=x.dtype, device=x.device)
    db = torch.empty((N,), dtype=x.dtype, device=x.device)
    rows, cols = 4, min(triton.next_power_of_2(N), 1024)
    _dx_kernel[(triton.cdiv(M, rows),)](dy, x, w, mean, rstd, dx, M, N, BLOCK_ROW_SIZE=rows, BLOCK_COL_SIZE=cols)
    rows, cols = min(triton.next_power_of_2(M), 32), 32
    _dwdb_kernel[(triton.cdiv(N, cols),)](dy, x, mean, rstd, dw, db, M, N, BLOCK_ROW_SIZE=rows, BLOCK_COL_SIZE=cols)
    return dx, dw, db
