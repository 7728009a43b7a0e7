"""gemm_epilogue (tests/corpus/gemm_epilogue/correct/libdevice_tanh.py) that also calls a
libdevice function the CPU interpreter does not evaluate, ``libdevice.jn`` (a Bessel function of
integer order; here multiplied by 0, so the values stay right on a GPU). On the CPU every check
that calls it is reported as not run, naming ``libdevice.jn``, never as a failure of the
arithmetic (docs/checks.md, "What the CPU cannot judge").
"""
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def _gemm_gelu_kernel(a_ptr, b_ptr, bias_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, sbias, scm, scn,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + ks
        a = tl.load(a_ptr + rows[:, None] * sam + kk[None, :] * sak,
                    mask=(rows[:, None] < M) & (kk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + kk[:, None] * sbk + cols[None, :] * sbn,
                    mask=(kk[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
    bias = tl.load(bias_ptr + cols * sbias, mask=cols < N, other=0.0).to(tl.float32)
    z = acc + bias[None, :]
    out = 0.5 * z * (1.0 + libdevice.tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)))
    out = out + 0.0 * libdevice.jn(1, z)  # a Bessel function: evaluated by libdevice on a GPU only
    mask = (rows[:, None] < M) and (cols[None, :] < N)
    tl.store(c_ptr + rows[:, None] * scm + cols[None, :] * scn, out.to(c_ptr.dtype.element_ty), mask=mask)


def gemm_epilogue(a, b, bias):
    if a.dim() != 2 or b.dim() != 2 or bias.dim() != 1:
        raise ValueError("a (M, K), b (K, N), bias (N,)")
    if a.shape[1] != b.shape[0] or bias.shape[0] != b.shape[1]:
        raise ValueError("incompatible dimensions")
    if a.dtype not in (torch.float16, torch.bfloat16) or b.dtype != a.dtype or bias.dtype != a.dtype:
        raise TypeError("a, b, bias: one dtype, float16 or bfloat16")
    if not (a.device == b.device == bias.device):
        raise ValueError("one device")
    if a.requires_grad or b.requires_grad or bias.requires_grad:
        raise ValueError("no autograd here")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)
    BLOCK_M, BLOCK_N, BLOCK_K = 32, 32, 32
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    _gemm_gelu_kernel[grid](a, b, bias, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                            bias.stride(0), c.stride(0), c.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K)
    return c
