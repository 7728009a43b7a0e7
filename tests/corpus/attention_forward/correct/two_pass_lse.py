"""attention_forward in two kernels: the first walks the key blocks of each query block for
the row statistics alone (the running max m and the sum l of exp(s - m), natural exp), and
stores m + log(l), each query's log-sum-exp, in an fp32 scratch; the second walks them again
and accumulates exp(s - lse) v, already normalised, with no rescaling. Twice the score work of
an online softmax, no accumulator rescales; plain pointer arithmetic with all four strides.
"""
import math

import torch
import triton
import triton.language as tl


@triton.jit
def _row_lse(Q, K, LSE, scale, sqb, sqh, sqs, sqd, skb, skh, sks, skd, H, S,
             D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BN)
    dd = tl.arange(0, D)
    q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqs + dd[None, :] * sqd, mask=rows[:, None] < S, other=0.0)
    m = tl.full((BM,), float("-inf"), tl.float32)
    total = tl.zeros((BM,), tl.float32)
    for start in range(0, tl.minimum((pid + 1) * BM, S), BN):
        keys = start + cols
        kt = tl.load(K + b * skb + h * skh + keys[None, :] * sks + dd[:, None] * skd, mask=keys[None, :] < S,
                     other=0.0)
        s = tl.dot(q, kt) * scale
        s = tl.where((rows[:, None] >= keys[None, :]) & (keys[None, :] < S), s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 1))
        total = total * tl.exp(m - m_new) + tl.sum(tl.exp(s - m_new[:, None]), 1)
        m = m_new
    tl.store(LSE + bh * S + rows, m + tl.log(total), mask=rows < S)


@triton.jit
def _weighted_values(Q, K, V, LSE, Out, scale, sqb, sqh, sqs, sqd, skb, skh, sks, skd, svb, svh, svs, svd,
                     sob, soh, sos, sod, H, S, D: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):
    pid = tl.program_id(0)
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BN)
    dd = tl.arange(0, D)
    q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqs + dd[None, :] * sqd, mask=rows[:, None] < S, other=0.0)
    lse = tl.load(LSE + bh * S + rows, mask=rows < S, other=0.0)
    acc = tl.zeros((BM, D), tl.float32)
    for start in range(0, tl.minimum((pid + 1) * BM, S), BN):
        keys = start + cols
        kt = tl.load(K + b * skb + h * skh + keys[None, :] * sks + dd[:, None] * skd, mask=keys[None, :] < S,
                     other=0.0)
        s = tl.dot(q, kt) * scale
        s = tl.where((rows[:, None] >= keys[None, :]) & (keys[None, :] < S), s, float("-inf"))
        p = tl.exp(s - lse[:, None])
        v = tl.load(V + b * svb + h * svh + keys[:, None] * svs + dd[None, :] * svd, mask=keys[:, None] < S,
                    other=0.0)
        acc += tl.dot(p.to(v.dtype), v)
    tl.store(Out + b * sob + h * soh + rows[:, None] * sos + dd[None, :] * sod, acc.to(Out.dtype.element_ty),
             mask=rows[:, None] < S)


def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    if q.dim() != 4 or tuple(k.shape) != tuple(q.shape) or tuple(v.shape) != tuple(q.shape):
        raise ValueError("q, k and v must be (B, H, S, D) of one shape")
    if q.dtype not in (torch.float16, torch.bfloat16) or q.dtype != k.dtype or q.dtype != v.dtype:
        raise TypeError("q, k and v must be all float16 or all bfloat16")
    if q.shape[3] not in (16, 32, 64, 128):
        raise ValueError("D must be 16, 32, 64 or 128")
    if q.device != k.device or q.device != v.device:
        raise ValueError("one device")
    if any(t.requires_grad for t in (q, k, v)):
        raise ValueError("inputs must not require grad")
    batch, heads, length, d = q.shape
    out = torch.empty(batch, heads, length, d, dtype=q.dtype, device=q.device)
    lse = torch.empty(batch * heads * length, dtype=torch.float32, device=q.device)
    bm = bn = 64
    grid = (triton.cdiv(length, bm), batch * heads)
    scale = 1.0 / math.sqrt(d)
    _row_lse[grid](q, k, lse, scale, *q.stride(), *k.stride(), heads, length, D=d, BM=bm, BN=bn)
    _weighted_values[grid](q, k, v, lse, out, scale, *q.stride(), *k.stride(), *v.stride(), *out.stride(),
                           heads, length, D=d, BM=bm, BN=bn)
    return out
