"""attention_forward as FlashAttention-2's first Triton kernels wrote it: q multiplied by
sm_scale * log2(e) and rounded back to the inputs' dtype once, before the key loop (so every
score is one tl.dot, then exp2), the causal mask applied with tl.where on every key block, and
one program per query block and batch looping over the heads (a grid of S / BLOCK x B).
"""
import math

import torch
import triton
import triton.language as tl


@triton.jit
def _fwd(Q, K, V, Out, qk_scale, sqb, sqh, sqs, sqd, skb, skh, sks, skd, svb, svh, svs, svd, sob, soh, sos, sod,
         H, S, D: tl.constexpr, BLOCK: tl.constexpr):
    start_m = tl.program_id(0)
    b = tl.program_id(1)
    offs_m = start_m * BLOCK + tl.arange(0, BLOCK)
    offs_n = tl.arange(0, BLOCK)
    offs_d = tl.arange(0, D)
    for h in range(0, H):
        q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqs + offs_d[None, :] * sqd,
                    mask=offs_m[:, None] < S, other=0.0)
        q = (q * qk_scale).to(q.dtype)
        m_i = tl.zeros((BLOCK,), tl.float32) - float("inf")
        l_i = tl.zeros((BLOCK,), tl.float32)
        acc = tl.zeros((BLOCK, D), tl.float32)
        for start_n in range(0, (start_m + 1) * BLOCK, BLOCK):
            cols = start_n + offs_n
            k = tl.load(K + b * skb + h * skh + cols[None, :] * sks + offs_d[:, None] * skd,
                        mask=cols[None, :] < S, other=0.0)
            qk = tl.dot(q, k)
            qk = tl.where(offs_m[:, None] >= cols[None, :], qk, float("-inf"))
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            p = tl.math.exp2(qk - m_ij[:, None])
            alpha = tl.math.exp2(m_i - m_ij)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(V + b * svb + h * svh + cols[:, None] * svs + offs_d[None, :] * svd,
                        mask=cols[:, None] < S, other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_ij
        tl.store(Out + b * sob + h * soh + offs_m[:, None] * sos + offs_d[None, :] * sod,
                 (acc / l_i[:, None]).to(Out.dtype.element_ty), mask=offs_m[:, None] < S)


def attention_forward(q, k, v):
    for name, t in (("k", k), ("v", v)):
        if t.shape != q.shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, q {tuple(q.shape)}")
        if t.dtype != q.dtype:
            raise TypeError(f"{name} is {t.dtype}, q {q.dtype}")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device}, q on {q.device}")
    if q.dim() != 4 or q.shape[-1] not in (16, 32, 64, 128):
        raise ValueError(f"need (B, H, S, D) with D in 16, 32, 64, 128; got {tuple(q.shape)}")
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"float16 or bfloat16 only, not {q.dtype}")
    if q.requires_grad or k.requires_grad or v.requires_grad:
        raise ValueError("explicit forward: no requires_grad")
    batch, heads, length, d = q.shape
    out = torch.empty((batch, heads, length, d), device=q.device, dtype=q.dtype)
    block = 32
    _fwd[(triton.cdiv(length, block), batch)](q, k, v, out, 1.4426950408889634 / math.sqrt(d), *q.stride(),
                                               *k.stride(), *v.stride(), *out.stride(), heads, length,
                                               D=d, BLOCK=block)
    return out
