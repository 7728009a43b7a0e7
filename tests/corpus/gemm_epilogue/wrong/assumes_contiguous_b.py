"""gemm_epilogue that passes b's strides as if b were contiguous (N, 1): right for a
contiguous b, wrong for a transposed b (strides (1, K)) or a strided view.

Expected failed checks: strided_inputs

Expected hint: stride
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _gemm_gelu(a_ptr, b_ptr, bias_ptr, out_ptr, M, N, K, sam, sak, sbk, sbn, sbias, som,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * sam + rk[None, :] * sak, mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * sbk + rn[None, :] * sbn, mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    bias = tl.load(bias_ptr + rn * sbias, mask=rn < N, other=0.0).to(tl.float32)
    z = acc + bias[None, :]
    out = z * tl.sigmoid(1.5957691216057308 * (z + 0.044715 * z * z * z))
    tl.store(out_ptr + rm[:, None] * som + rn[None, :],
             out.to(out_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


def gemm_epilogue(a, b, bias):
    if a.dim() != 2 or b.dim() != 2 or bias.dim() != 1 or a.shape[1] != b.shape[0] or bias.shape[0] != b.shape[1]:
        raise ValueError("need a (M, K), b (K, N), bias (N,)")
    if a.dtype not in (torch.float16, torch.bfloat16) or b.dtype != a.dtype or bias.dtype != a.dtype:
        raise TypeError("one dtype, float16 or bfloat16")
    if a.device != b.device or a.device != bias.device:
        raise ValueError("one device")
    if a.requires_grad or b.requires_grad or bias.requires_grad:
        raise ValueError("inputs must not require grad")
    M, K = a.shape
    N = b.shape[1]
    out = torch.empty((M, N), dtype=a.dtype, device=a.device)
    BM, BN, BK = 32, 32, 32
    _gemm_gelu[(triton.cdiv(M, BM), triton.cdiv(N, BN))](a, b, bias, out, M, N, K, a.stride(0), a.stride(1),
                                                         b.shape[1], 1, bias.stride(0), out.stride(0),
                                                         BM=BM, BN=BN, BK=BK)
    return out
