"""attention_backward of Triton's tutorial 06 (as correct/tutorial06_bwd.py) whose kernel stages
q, k, v and dout through bfloat16 on load (``x.to(tl.bfloat16).to(x.dtype)``: one code path
written for bfloat16 and reused for float16): float16 inputs keep 8 of their 11 significant
bits, so on ordinary float16 data dq, dk and dv are about a hundred times the tolerance off.
Every input the unit checks drew on the 2^-5 grid (7 significant bits, exact in bfloat16)
hides it. The training step's inputs are full float16: its loss bound lets it through, its
step outputs compared element by element with the oracle's do not (just over the tolerance,
on dk).

Expected failed checks: float16_values, training_step

Expected hint: 8 significant bits
"""
import math

import torch
import triton
import triton.language as tl

# Module globals a @triton.jit function reads must be constexpr when compiled (the CPU
# interpreter accepts plain floats; Triton's compiler refuses them).
RCP_LN2 = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471824645996)


@triton.jit
def _attn_bwd_preprocess(O, DO, Delta, sob, soh, som, sod, sdb, sdh, sdm, sdd, H, N_CTX,
                         BLOCK_M: tl.constexpr, HEAD_DIM: tl.constexpr):
    off_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    off_hz = tl.program_id(1)
    b, h = off_hz // H, off_hz % H
    off_n = tl.arange(0, HEAD_DIM)
    rows = off_m[:, None] < N_CTX
    o = tl.load(O + b * sob + h * soh + off_m[:, None] * som + off_n[None, :] * sod, mask=rows, other=0.0)
    do = tl.load(DO + b * sdb + h * sdh + off_m[:, None] * sdm + off_n[None, :] * sdd, mask=rows, other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)
    tl.store(Delta + off_hz * N_CTX + off_m, delta, mask=off_m < N_CTX)


@triton.jit
def _stage(x):
    """The value through a bfloat16 register and back (the mistake: 8 significant bits kept)."""
    return x.to(tl.bfloat16).to(x.dtype)


@triton.jit
def _attn_bwd(Q, K, V, sm_scale, DO, DQ, DK, DV, LSE, Delta,
              sqb, sqh, sqm, sqd, skb, skh, skm, skd, svb, svh, svm, svd, sdb, sdh, sdm, sdd,
              slb, slh, slm, sgb, sgh, sgm, sgd, H, N_CTX,
              BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr):
    pid = tl.program_id(0)
    bhid = tl.program_id(1)
    b, h = bhid // H, bhid % H
    Q += b * sqb + h * sqh
    K += b * skb + h * skh
    V += b * svb + h * svh
    DO += b * sdb + h * sdh
    LSE += b * slb + h * slh
    Delta += bhid * N_CTX
    offs_k = tl.arange(0, HEAD_DIM)
    qk_scale = sm_scale * RCP_LN2
    # ---- dk, dv for the keys start_n .. start_n + BLOCK ----
    start_n = pid * BLOCK
    offs_n = start_n + tl.arange(0, BLOCK)
    k = _stage(tl.load(K + offs_n[:, None] * skm + offs_k[None, :] * skd, mask=offs_n[:, None] < N_CTX, other=0.0))
    k = (k * qk_scale).to(k.dtype)
    v = _stage(tl.load(V + offs_n[:, None] * svm + offs_k[None, :] * svd, mask=offs_n[:, None] < N_CTX, other=0.0))
    dk = tl.zeros([BLOCK, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK, HEAD_DIM], dtype=tl.float32)
    for start_m in range(start_n, N_CTX, BLOCK):
        offs_m = start_m + tl.arange(0, BLOCK)
        in_m = offs_m < N_CTX
        qT = _stage(tl.load(Q + offs_m[None, :] * sqm + offs_k[:, None] * sqd, mask=in_m[None, :], other=0.0))
        m = tl.load(LSE + offs_m * slm, mask=in_m, other=0.0) * RCP_LN2
        qkT = tl.dot(k, qT)
        pT = tl.math.exp2(qkT - m[None, :])
        pT = tl.where((offs_m[None, :] >= offs_n[:, None]) & in_m[None, :], pT, 0.0)  # autoregressive mask
        do = _stage(tl.load(DO + offs_m[:, None] * sdm + offs_k[None, :] * sdd, mask=in_m[:, None], other=0.0))
        dv += tl.dot(pT.to(do.dtype), do)
        Di = tl.load(Delta + offs_m, mask=in_m, other=0.0)
        dpT = tl.dot(v, tl.trans(do)).to(tl.float32)
        dsT = pT * (dpT - Di[None, :])
        dk += tl.dot(dsT.to(qT.dtype), tl.trans(qT))
    out_n = offs_n[:, None] < N_CTX
    tl.store(DV + b * sgb + h * sgh + offs_n[:, None] * sgm + offs_k[None, :] * sgd, dv.to(DV.dtype.element_ty),
             mask=out_n)
    dk *= sm_scale
    tl.store(DK + b * sgb + h * sgh + offs_n[:, None] * sgm + offs_k[None, :] * sgd, dk.to(DK.dtype.element_ty),
             mask=out_n)
    # ---- dq for the queries start_m .. start_m + BLOCK ----
    start_m = pid * BLOCK
    offs_m = start_m + tl.arange(0, BLOCK)
    in_m = offs_m < N_CTX
    q = _stage(tl.load(Q + offs_m[:, None] * sqm + offs_k[None, :] * sqd, mask=in_m[:, None], other=0.0))
    do = _stage(tl.load(DO + offs_m[:, None] * sdm + offs_k[None, :] * sdd, mask=in_m[:, None], other=0.0))
    m = tl.load(LSE + offs_m * slm, mask=in_m, other=0.0)[:, None] * RCP_LN2
    Di = tl.load(Delta + offs_m, mask=in_m, other=0.0)
    dq = tl.zeros([BLOCK, HEAD_DIM], dtype=tl.float32)
    for start in range(0, start_m + BLOCK, BLOCK):
        offs_n = start + tl.arange(0, BLOCK)
        in_n = offs_n < N_CTX
        kT = _stage(tl.load(K + offs_n[None, :] * skm + offs_k[:, None] * skd, mask=in_n[None, :], other=0.0))
        kT = (kT * qk_scale).to(kT.dtype)
        vT = _stage(tl.load(V + offs_n[None, :] * svm + offs_k[:, None] * svd, mask=in_n[None, :], other=0.0))
        p = tl.math.exp2(tl.dot(q, kT) - m)
        p = tl.where((offs_m[:, None] >= offs_n[None, :]) & in_n[None, :], p, 0.0)
        dp = tl.dot(do, vT).to(tl.float32)
        ds = p * (dp - Di[:, None])
        dq += tl.dot(ds.to(kT.dtype), tl.trans(kT))  # kT was prescaled: undo its 1/ln 2 below
    dq *= LN2
    tl.store(DQ + b * sgb + h * sgh + offs_m[:, None] * sgm + offs_k[None, :] * sgd, dq.to(DQ.dtype.element_ty),
             mask=in_m[:, None])


def attention_backward(q, k, v, out, dout, lse):
    tensors = (q, k, v, out, dout)
    if q.dim() != 4 or any(t.shape != q.shape for t in tensors) or lse.shape != q.shape[:3]:
        raise ValueError("q, k, v, out, dout must be (B, H, S, D) and lse (B, H, S)")
    if q.dtype not in (torch.float16, torch.bfloat16) or any(t.dtype != q.dtype for t in tensors):
        raise TypeError("q, k, v, out, dout must share float16 or bfloat16")
    if lse.dtype != torch.float32:
        raise TypeError("lse must be float32")
    if q.shape[-1] not in (16, 32, 64, 128):
        raise ValueError("head dim must be 16, 32, 64 or 128")
    if any(t.device != q.device for t in (*tensors, lse)):
        raise ValueError("one device")
    if any(t.requires_grad for t in (*tensors, lse)):
        raise ValueError("explicit backward: no requires_grad")
    batch, n_head, n_ctx, head_dim = q.shape
    dq, dk, dv = (torch.empty((batch, n_head, n_ctx, head_dim), dtype=q.dtype, device=q.device) for _ in range(3))
    delta = torch.empty((batch, n_head, n_ctx), dtype=torch.float32, device=q.device)
    block = 32
    grid = (triton.cdiv(n_ctx, block), batch * n_head)
    _attn_bwd_preprocess[grid](out, dout, delta, *out.stride(), *dout.stride(), n_head, n_ctx,
                               BLOCK_M=block, HEAD_DIM=head_dim)
    _attn_bwd[grid](q, k, v, 1.0 / math.sqrt(head_dim), dout, dq, dk, dv, lse, delta,
                    *q.stride(), *k.stride(), *v.stride(), *dout.stride(), *lse.stride(), *dq.stride(),
                    n_head, n_ctx, BLOCK=block, HEAD_DIM=head_dim)
    return dq, dk, dv
