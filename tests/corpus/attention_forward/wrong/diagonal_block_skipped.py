"""attention_forward whose key loop stops where the query block starts: the keys of the diagonal
block (each query's own key among them) are never seen, so the first block's queries attend to
nothing (0 / 0) and every other query misses its most recent keys.

Expected failed checks: float16_values, bfloat16_values, causality, convex_hull, strided_inputs, edge_shapes, fresh_results

Expected hint: does not cover every element
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

__all__ = ["attention_forward"]

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
HEAD_DIMS = (16, 32, 64, 128)
LOG2_E = 1.4426950408889634


@triton.jit
def _attention_forward_kernel(
    Q, K, V, Out, qk_scale,
    sqb, sqh, sqs, sqd, skb, skh, sks, skd, svb, svh, svs, svd, sob, soh, sos, sod,
    H, S,
    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = (bh // H).to(tl.int64)
    h = (bh % H).to(tl.int64)
    q_base = Q + b * sqb + h * sqh
    k_base = K + b * skb + h * skh
    v_base = V + b * svb + h * svh
    o_base = Out + b * sob + h * soh
    rows = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    dims = tl.arange(0, D)
    q = tl.load(q_base + rows[:, None] * sqs + dims[None, :] * sqd, mask=rows[:, None] < S, other=0.0)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    # keys of whole blocks strictly below this query block: no mask needed
    below = start_m * BLOCK_M
    end = tl.minimum(start_m * BLOCK_M, S)
    for start_n in range(0, end, BLOCK_N):
        keys = start_n + cols
        k = tl.load(k_base + keys[None, :] * sks + dims[:, None] * skd, mask=keys[None, :] < S, other=0.0)
        s = tl.dot(q, k) * qk_scale
        if start_n + BLOCK_N > below:  # a block on the diagonal (or past S): mask keys j > i
            s = tl.where(rows[:, None] >= keys[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + keys[:, None] * svs + dims[None, :] * svd, mask=keys[:, None] < S, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(o_base + rows[:, None] * sos + dims[None, :] * sod, out.to(Out.dtype.element_ty), mask=rows[:, None] < S)


def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention of q, k, v (B, H, S, D); returns a fresh contiguous (B, H, S, D) tensor.

    Raises:
        ValueError: shapes that are not one (B, H, S, D), a head dim not in HEAD_DIMS, tensors
            on different devices, or an input that requires grad.
        TypeError: dtypes that are not one of float16 and bfloat16.
    """
    if q.dim() != 4 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"need q, k, v of one shape (B, H, S, D); got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if q.dtype not in SUPPORTED_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k and v must share float16 or bfloat16; got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[-1] not in HEAD_DIMS:
        raise ValueError(f"head dim D must be one of {HEAD_DIMS}; got {q.shape[-1]}")
    if k.device != q.device or v.device != q.device:
        raise ValueError("q, k and v must be on one device")
    if q.requires_grad or k.requires_grad or v.requires_grad:
        raise ValueError("attention_forward has no autograd: inputs must not require grad")
    batch, heads, length, d = q.shape
    out = torch.empty((batch, heads, length, d), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    block = 64 if q.device.type == "cpu" or d > 64 else 128
    grid = (triton.cdiv(length, block), batch * heads)
    _attention_forward_kernel[grid](
        q, k, v, out, LOG2_E / math.sqrt(d),
        *q.stride(), *k.stride(), *v.stride(), *out.stride(),
        heads, length, D=d, BLOCK_M=block, BLOCK_N=block)
    return out
