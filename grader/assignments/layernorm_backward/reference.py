"""Course reference solution for the `layernorm_backward` assignment.

    xhat = (x - mean) * rstd,  wdy = w * dy
    dx = (wdy - (xhat * mean_j(xhat * wdy) + mean_j(wdy))) * rstd
    dw = sum_i dy * xhat,  db = sum_i dy

`dy`, `x` (M, N) and `w` (N,) share a dtype (float32, float16 or bfloat16), each with its own
strides; `mean` and `rstd` (M,) are the forward's float32 statistics. Two kernels, no locks and
no atomics, so the result does not depend on the order programs run in:

* `_ln_bwd_rows_kernel`: G programs; program p takes rows p, p + G, p + 2G, ... For each row it
  sums xhat * wdy and wdy over the row (in BLOCK_N chunks when the row is longer than a
  block), then writes dx and adds dy * xhat and dy into row p of two fp32 partial buffers
  (G, N) that only program p touches. When a row fits in one block the partial sums stay in
  registers across the program's rows and are stored once.
* `_ln_bwd_dwdb_kernel`: one program per BLOCK_N columns sums the G partial rows and writes
  dw and db in the output dtype.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["layernorm_backward"]

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


@triton.jit
def _ln_bwd_rows_kernel(dy_ptr, x_ptr, w_ptr, mean_ptr, rstd_ptr, dx_ptr, pdw_ptr, pdb_ptr,
                        M, N, s_dym, s_dyn, s_xm, s_xn, s_w, s_mean, s_rstd, s_dxm,
                        BLOCK_N: tl.constexpr, ONE_BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    if ONE_BLOCK:
        mask = cols < N
        w = tl.load(w_ptr + cols * s_w, mask=mask, other=0.0).to(tl.float32)
        acc_dw = tl.zeros([BLOCK_N], dtype=tl.float32)
        acc_db = tl.zeros([BLOCK_N], dtype=tl.float32)
        for row in range(pid, M, programs):
            r = tl.cast(row, tl.int64)
            x = tl.load(x_ptr + r * s_xm + cols * s_xn, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + r * s_dym + cols * s_dyn, mask=mask, other=0.0).to(tl.float32)
            mean = tl.load(mean_ptr + r * s_mean)
            rstd = tl.load(rstd_ptr + r * s_rstd)
            xhat = tl.where(mask, (x - mean) * rstd, 0.0)
            wdy = w * dy
            c1 = tl.sum(xhat * wdy, axis=0) / N
            c2 = tl.sum(wdy, axis=0) / N
            dx = (wdy - (xhat * c1 + c2)) * rstd
            tl.store(dx_ptr + r * s_dxm + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)
            acc_dw += dy * xhat
            acc_db += dy
        tl.store(pdw_ptr + pid * N + cols, acc_dw, mask=mask)
        tl.store(pdb_ptr + pid * N + cols, acc_db, mask=mask)
    else:
        for row in range(pid, M, programs):
            r = tl.cast(row, tl.int64)
            mean = tl.load(mean_ptr + r * s_mean)
            rstd = tl.load(rstd_ptr + r * s_rstd)
            sum1 = tl.zeros([BLOCK_N], dtype=tl.float32)
            sum2 = tl.zeros([BLOCK_N], dtype=tl.float32)
            for start in range(0, N, BLOCK_N):
                c = start + cols
                mask = c < N
                x = tl.load(x_ptr + r * s_xm + c * s_xn, mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(dy_ptr + r * s_dym + c * s_dyn, mask=mask, other=0.0).to(tl.float32)
                w = tl.load(w_ptr + c * s_w, mask=mask, other=0.0).to(tl.float32)
                xhat = tl.where(mask, (x - mean) * rstd, 0.0)
                sum1 += xhat * w * dy
                sum2 += w * dy
            c1 = tl.sum(sum1, axis=0) / N
            c2 = tl.sum(sum2, axis=0) / N
            for start in range(0, N, BLOCK_N):
                c = start + cols
                mask = c < N
                x = tl.load(x_ptr + r * s_xm + c * s_xn, mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(dy_ptr + r * s_dym + c * s_dyn, mask=mask, other=0.0).to(tl.float32)
                w = tl.load(w_ptr + c * s_w, mask=mask, other=0.0).to(tl.float32)
                xhat = tl.where(mask, (x - mean) * rstd, 0.0)
                dx = (w * dy - (xhat * c1 + c2)) * rstd
                tl.store(dx_ptr + r * s_dxm + c, dx.to(dx_ptr.dtype.element_ty), mask=mask)
                pdw = pdw_ptr + pid * N + c
                pdb = pdb_ptr + pid * N + c
                tl.store(pdw, tl.load(pdw, mask=mask, other=0.0) + dy * xhat, mask=mask)
                tl.store(pdb, tl.load(pdb, mask=mask, other=0.0) + dy, mask=mask)


@triton.jit
def _ln_bwd_dwdb_kernel(pdw_ptr, pdb_ptr, dw_ptr, db_ptr, G, N, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc_dw = tl.zeros([BLOCK_G, BLOCK_N], dtype=tl.float32)
    acc_db = tl.zeros([BLOCK_G, BLOCK_N], dtype=tl.float32)
    for start in range(0, G, BLOCK_G):
        rows = start + tl.arange(0, BLOCK_G)
        mask = (rows[:, None] < G) & (cols[None, :] < N)
        offs = rows[:, None] * N + cols[None, :]
        acc_dw += tl.load(pdw_ptr + offs, mask=mask, other=0.0)
        acc_db += tl.load(pdb_ptr + offs, mask=mask, other=0.0)
    tl.store(dw_ptr + cols, tl.sum(acc_dw, axis=0).to(dw_ptr.dtype.element_ty), mask=cols < N)
    tl.store(db_ptr + cols, tl.sum(acc_db, axis=0).to(db_ptr.dtype.element_ty), mask=cols < N)


def layernorm_backward(dy: torch.Tensor, x: torch.Tensor, w: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dx, dw, db) of layer norm from the saved statistics; fresh contiguous tensors of x's dtype.

    Raises:
        ValueError: shapes disagree (dy, x (M, N); w (N,); mean, rstd (M,)), devices differ, or
            an input requires grad.
        TypeError: dy, x, w not of one float32/float16/bfloat16 dtype, or mean/rstd not float32.
    """
    if x.dim() != 2 or dy.shape != x.shape or w.shape != (x.shape[1],) or mean.shape != (x.shape[0],) \
            or rstd.shape != (x.shape[0],):
        raise ValueError(f"need dy, x (M, N), w (N,), mean, rstd (M,); got {tuple(dy.shape)}, {tuple(x.shape)}, "
                         f"{tuple(w.shape)}, {tuple(mean.shape)}, {tuple(rstd.shape)}")
    if x.dtype not in SUPPORTED_DTYPES or dy.dtype != x.dtype or w.dtype != x.dtype:
        raise TypeError(f"dy, x and w must share a float32/float16/bfloat16 dtype; got {dy.dtype}, {x.dtype}, {w.dtype}")
    if mean.dtype != torch.float32 or rstd.dtype != torch.float32:
        raise TypeError(f"mean and rstd must be float32; got {mean.dtype}, {rstd.dtype}")
    tensors = (dy, x, w, mean, rstd)
    if any(t.device != x.device for t in tensors):
        raise ValueError("dy, x, w, mean and rstd must be on one device")
    if any(t.requires_grad for t in tensors):
        raise ValueError("layernorm_backward is an explicit backward: inputs must not require grad")
    m, n = x.shape
    interpreted = x.device.type == "cpu"
    if interpreted:
        programs, max_block = min(m, 4), 65536
    else:
        programs, max_block = min(m, 4 * torch.cuda.get_device_properties(x.device).multi_processor_count), 8192
    block_n = min(triton.next_power_of_2(n), max_block)
    partial_dw = torch.zeros((programs, n), dtype=torch.float32, device=x.device)
    partial_db = torch.zeros((programs, n), dtype=torch.float32, device=x.device)
    dx = torch.empty((m, n), dtype=x.dtype, device=x.device)
    dw = torch.empty((n,), dtype=x.dtype, device=x.device)
    db = torch.empty((n,), dtype=x.dtype, device=x.device)
    warps = 1 if interpreted else min(max(block_n // 256, 1), 16)
    _ln_bwd_rows_kernel[(programs,)](dy, x, w, mean, rstd, dx, partial_dw, partial_db, m, n,
                                     dy.stride(0), dy.stride(1), x.stride(0), x.stride(1), w.stride(0),
                                     mean.stride(0), rstd.stride(0), dx.stride(0),
                                     BLOCK_N=block_n, ONE_BLOCK=n <= block_n, num_warps=warps)
    cols = 4096 if interpreted else 128
    block_g = triton.next_power_of_2(programs) if interpreted else 32
    _ln_bwd_dwdb_kernel[(triton.cdiv(n, cols),)](partial_dw, partial_db, dw, db, programs, n,
                                                 BLOCK_G=block_g, BLOCK_N=cols)
    return dx, dw, db
