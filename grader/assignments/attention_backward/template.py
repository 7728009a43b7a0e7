"""attention_backward.py: starter file (assignment ``attention_backward``).

Write Triton kernels for the backward of causal softmax attention, FlashAttention-2's way:

    attention_backward(q, k, v, out, dout, lse) -> (dq, dk, dv)

q, k, v, out, dout: (B, H, S, D), all float16 or all bfloat16, D in {16, 32, 64, 128}, each
with its own strides; lse: (B, H, S) float32, the natural-log logsumexp of each query's scores
q.k / sqrt(D) over the keys j <= i. With P = exp(q k^T / sqrt(D) - lse) (keys j > i at 0) and
Delta = rowsum(dout * out):

    dv = P^T dout,  dS = P * (dout v^T - Delta),  dq = dS k / sqrt(D),  dk = dS^T q / sqrt(D)

Return fresh contiguous dq, dk, dv of q's dtype. Check locally with
``grader check attention_backward.py``; the checks and tolerances: docs/checks.md.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _dkdv_kernel(Q, K, V, DO, LSE, DK, DV, scale, S, D: tl.constexpr, BLOCK: tl.constexpr):
    start_n = tl.program_id(0)  # noqa: F841 - the template leaves the kernel body to the student
    # TODO: for this block of keys, walk the query blocks from the diagonal on: recompute P,
    # accumulate dv += P^T dout and dk += dS^T q in fp32, store them (masked past S).
    pass


def attention_backward(q, k, v, out, dout, lse):
    tensors = (q, k, v, out, dout)
    if q.dim() != 4 or any(t.shape != q.shape for t in tensors) or lse.shape != q.shape[:3]:
        raise ValueError("need q, k, v, out, dout (B, H, S, D) and lse (B, H, S)")
    if q.dtype not in (torch.float16, torch.bfloat16) or any(t.dtype != q.dtype for t in tensors) \
            or lse.dtype != torch.float32:
        raise TypeError("q, k, v, out, dout: one of float16/bfloat16; lse: float32")
    if any(t.device != q.device for t in (*tensors, lse)):
        raise ValueError("every input must be on one device")
    if any(t.requires_grad for t in (*tensors, lse)):
        raise ValueError("explicit backward: inputs must not require grad")
    dq, dk, dv = (torch.empty(q.shape, dtype=q.dtype, device=q.device) for _ in range(3))
    raise NotImplementedError("attention_backward: write the kernels")
