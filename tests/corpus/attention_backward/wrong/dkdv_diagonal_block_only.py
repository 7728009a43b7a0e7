"""attention_backward whose dk/dv kernel accumulates over the wrong query blocks: only the
diagonal block of queries, not every block from the diagonal to S, so keys miss the queries
of later blocks (right while S fits in one block).

No hint names it: the value check's own hint gives the formula; dv_key_sum fails after it.
dk_key_sum only on some draws: what a key misses is the dS of later queries, whose sum over the
earlier keys is small (1.4x its bound at seed 0 before float16_values drew one more case, under
it since), so it is not expected.

Expected failed checks: float16_values, bfloat16_values, dv_key_sum, edge_shapes

Expected hint: none
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

__all__ = ["attention_backward"]

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
HEAD_DIMS = (16, 32, 64, 128)


@triton.jit
def _delta_kernel(Out, DO, Delta, sob, soh, sos, sod, sdb, sdh, sds, sdd, H, S,
                  D: tl.constexpr, BLOCK_M: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    mask = rows[:, None] < S
    o = tl.load(Out + b * sob + h * soh + rows[:, None] * sos + dims[None, :] * sod, mask=mask, other=0.0)
    do = tl.load(DO + b * sdb + h * sdh + rows[:, None] * sds + dims[None, :] * sdd, mask=mask, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(Delta + bh * S + rows, delta, mask=rows < S)


@triton.jit
def _dkdv_kernel(Q, K, V, DO, LSE, Delta, DK, DV, scale,
                 sqb, sqh, sqs, sqd, skb, skh, sks, skd, svb, svh, svs, svd, sdb, sdh, sds, sdd,
                 slb, slh, sls, sob, soh, sos, sod, H, S,
                 D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_n = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    keys = start_n * BLOCK_N + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, D)
    kmask = keys[:, None] < S
    k = tl.load(K + b * skb + h * skh + keys[:, None] * sks + dims[None, :] * skd, mask=kmask, other=0.0)
    v = tl.load(V + b * svb + h * svh + keys[:, None] * svs + dims[None, :] * svd, mask=kmask, other=0.0)
    dk = tl.zeros((BLOCK_N, D), tl.float32)
    dv = tl.zeros((BLOCK_N, D), tl.float32)
    for start_m in range(start_n * BLOCK_N, tl.minimum(start_n * BLOCK_N + BLOCK_M, S), BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        qmask = rows[:, None] < S
        q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqs + dims[None, :] * sqd, mask=qmask, other=0.0)
        do = tl.load(DO + b * sdb + h * sdh + rows[:, None] * sds + dims[None, :] * sdd, mask=qmask, other=0.0)
        lse = tl.load(LSE + b * slb + h * slh + rows * sls, mask=rows < S, other=0.0)
        delta = tl.load(Delta + bh * S + rows, mask=rows < S, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale  # (BLOCK_M, BLOCK_N)
        keep = (rows[:, None] >= keys[None, :]) & (rows[:, None] < S)
        p = tl.where(keep, tl.exp(s - lse[:, None]), 0.0)
        dv += tl.dot(tl.trans(p.to(do.dtype)), do)
        dp = tl.dot(do, tl.trans(v))
        ds = p * (dp - delta[:, None])
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q)
    dk = dk * scale
    tl.store(DK + b * sob + h * soh + keys[:, None] * sos + dims[None, :] * sod, dk.to(DK.dtype.element_ty), mask=kmask)
    tl.store(DV + b * sob + h * soh + keys[:, None] * sos + dims[None, :] * sod, dv.to(DV.dtype.element_ty), mask=kmask)


@triton.jit
def _dq_kernel(Q, K, V, DO, LSE, Delta, DQ, scale,
               sqb, sqh, sqs, sqd, skb, skh, sks, skd, svb, svh, svs, svd, sdb, sdh, sds, sdd,
               slb, slh, sls, sob, soh, sos, sod, H, S,
               D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    qmask = rows[:, None] < S
    q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqs + dims[None, :] * sqd, mask=qmask, other=0.0)
    do = tl.load(DO + b * sdb + h * sdh + rows[:, None] * sds + dims[None, :] * sdd, mask=qmask, other=0.0)
    lse = tl.load(LSE + b * slb + h * slh + rows * sls, mask=rows < S, other=0.0)
    delta = tl.load(Delta + bh * S + rows, mask=rows < S, other=0.0)
    dq = tl.zeros((BLOCK_M, D), tl.float32)
    for start_n in range(0, tl.minimum((start_m + 1) * BLOCK_M, S), BLOCK_N):
        keys = start_n + tl.arange(0, BLOCK_N)
        kmask = keys[:, None] < S
        k = tl.load(K + b * skb + h * skh + keys[:, None] * sks + dims[None, :] * skd, mask=kmask, other=0.0)
        v = tl.load(V + b * svb + h * svh + keys[:, None] * svs + dims[None, :] * svd, mask=kmask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        keep = (rows[:, None] >= keys[None, :]) & (keys[None, :] < S)
        p = tl.where(keep, tl.exp(s - lse[:, None]), 0.0)
        dp = tl.dot(do, tl.trans(v))
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k)
    dq = dq * scale
    tl.store(DQ + b * sob + h * soh + rows[:, None] * sos + dims[None, :] * sod, dq.to(DQ.dtype.element_ty), mask=qmask)


def attention_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, dout: torch.Tensor,
                       lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of causal attention; fresh contiguous tensors of q's shape and dtype.

    Raises:
        ValueError: shapes that disagree, a head dim not in HEAD_DIMS, tensors on different
            devices, an input that requires grad.
        TypeError: q, k, v, out, dout not of one dtype among float16 and bfloat16, or lse not
            float32.
    """
    tensors = (q, k, v, out, dout)
    if q.dim() != 4 or any(t.shape != q.shape for t in tensors) or lse.shape != q.shape[:3]:
        raise ValueError(f"need q, k, v, out, dout (B, H, S, D) and lse (B, H, S); got "
                         f"{[tuple(t.shape) for t in (*tensors, lse)]}")
    if q.dtype not in SUPPORTED_DTYPES or any(t.dtype != q.dtype for t in tensors) or lse.dtype != torch.float32:
        raise TypeError(f"q, k, v, out, dout must share float16 or bfloat16 and lse be float32; got "
                        f"{[t.dtype for t in (*tensors, lse)]}")
    if q.shape[-1] not in HEAD_DIMS:
        raise ValueError(f"head dim D must be one of {HEAD_DIMS}; got {q.shape[-1]}")
    if any(t.device != q.device for t in (*tensors, lse)):
        raise ValueError("every input must be on one device")
    if any(t.requires_grad for t in (*tensors, lse)):
        raise ValueError("attention_backward is an explicit backward: inputs must not require grad")
    batch, heads, length, d = q.shape
    dq, dk, dv = (torch.empty((batch, heads, length, d), dtype=q.dtype, device=q.device) for _ in range(3))
    if dq.numel() == 0:
        return dq, dk, dv
    delta = torch.empty(batch * heads * length, dtype=torch.float32, device=q.device)
    block = 64
    grid = (triton.cdiv(length, block), batch * heads)
    _delta_kernel[grid](out, dout, delta, *out.stride(), *dout.stride(), heads, length, D=d, BLOCK_M=block)
    strides = (*q.stride(), *k.stride(), *v.stride(), *dout.stride(), *lse.stride())
    scale = 1.0 / math.sqrt(d)
    _dkdv_kernel[grid](q, k, v, dout, lse, delta, dk, dv, scale, *strides, *dk.stride(), heads, length,
                       D=d, BLOCK_M=block, BLOCK_N=block)
    _dq_kernel[grid](q, k, v, dout, lse, delta, dq, scale, *strides, *dq.stride(), heads, length,
                     D=d, BLOCK_M=block, BLOCK_N=block)
    return dq, dk, dv
