"""attention_forward.py: starter file (assignment ``attention_forward``).

Write Triton kernels that compute causal softmax attention

    out[b, h, i] = sum over keys j <= i of softmax_j(q[b, h, i] . k[b, h, j] / sqrt(D)) * v[b, h, j]

for q, k, v of shape (B, H, S, D), all float16 or all bfloat16, D in {16, 32, 64, 128}, S any
length, each tensor with its own four strides (a (B, S, H, D) buffer viewed as (B, H, S, D) is
a valid input). FlashAttention's way: one program per block of queries of one batch and head,
an online softmax over blocks of keys (a running max m and sum l per query; rescale the fp32
accumulator by exp(m_old - m_new) whenever m rises), out = acc / l. Return a fresh contiguous
(B, H, S, D) tensor of the inputs' dtype. Check locally with ``grader check attention_forward.py``;
hand in with ``grader submit attention_forward.py``. The checks and their tolerances:
docs/checks.md.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _attention_kernel(Q, K, V, Out, sm_scale,
                      sqb, sqh, sqs, sqd, skb, skh, sks, skd, svb, svh, svs, svd, sob, soh, sos, sod,
                      H, S, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)  # noqa: F841 - the template leaves the kernel body to the student
    bh = tl.program_id(1)  # noqa: F841
    # TODO: load this program's BLOCK_M queries (mask rows >= S); for each block of keys up to the
    # diagonal: s = tl.dot(q, k) * sm_scale in fp32, scores of keys j > i (and j >= S) to -inf,
    # the online softmax update, acc = acc * alpha + tl.dot(p.to(v.dtype), v); then store
    # acc / l in out's dtype (masked).
    pass


def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    if q.dim() != 4 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError(f"need q, k, v of one shape (B, H, S, D); got {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}")
    if q.dtype not in (torch.float16, torch.bfloat16) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"q, k and v must share float16 or bfloat16; got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.shape[-1] not in (16, 32, 64, 128):
        raise ValueError(f"head dim D must be 16, 32, 64 or 128; got {q.shape[-1]}")
    if k.device != q.device or v.device != q.device:
        raise ValueError("q, k and v must be on one device")
    if q.requires_grad or k.requires_grad or v.requires_grad:
        raise ValueError("attention_forward has no autograd: inputs must not require grad")
    batch, heads, length, d = q.shape
    out = torch.empty((batch, heads, length, d), dtype=q.dtype, device=q.device)
    block = 64
    grid = (triton.cdiv(length, block), batch * heads)
    _attention_kernel[grid](q, k, v, out, 1.0 / d**0.5, *q.stride(), *k.stride(), *v.stride(), *out.stride(),
                            heads, length, D=d, BLOCK_M=block, BLOCK_N=block)
    return out
