"""gemm_epilogue with block pointers: tl.make_block_ptr for a and b (their own shapes and strides,
so transposed views need nothing special), boundary_check with zero padding for the ragged
edges, tl.advance along K, and a block pointer for the store. GELU via tanh written with exp
of a non-positive argument only.

Expected failed checks: none
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _tanh(y):
    e = tl.exp(-2.0 * tl.abs(y))  # in (0, 1]: no overflow
    t = (1.0 - e) / (1.0 + e)
    return tl.where(y >= 0, t, -t)


@triton.jit
def _kernel(a_ptr, b_ptr, bias_ptr, out_ptr, M, N, K, sam, sak, sbk, sbn, sbias, som, son,
            BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    a_blk = tl.make_block_ptr(a_ptr, shape=(M, K), strides=(sam, sak), offsets=(pid_m * BM, 0),
                              block_shape=(BM, BK), order=(1, 0))
    b_blk = tl.make_block_ptr(b_ptr, shape=(K, N), strides=(sbk, sbn), offsets=(0, pid_n * BN),
                              block_shape=(BK, BN), order=(1, 0))
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for _ in range(0, tl.cdiv(K, BK)):
        a = tl.load(a_blk, boundary_check=(0, 1), padding_option="zero")
        b = tl.load(b_blk, boundary_check=(0, 1), padding_option="zero")
        acc += tl.dot(a, b)
        a_blk = tl.advance(a_blk, (0, BK))
        b_blk = tl.advance(b_blk, (BK, 0))
    cols = pid_n * BN + tl.arange(0, BN)
    z = acc + tl.load(bias_ptr + cols * sbias, mask=cols < N, other=0.0).to(tl.float32)[None, :]
    out = 0.5 * z * (1.0 + _tanh(0.7978845608028654 * (z + 0.044715 * z * z * z)))
    o_blk = tl.make_block_ptr(out_ptr, shape=(M, N), strides=(som, son), offsets=(pid_m * BM, pid_n * BN),
                              block_shape=(BM, BN), order=(1, 0))
    tl.store(o_blk, out.to(out_ptr.dtype.element_ty), boundary_check=(0, 1))


def gemm_epilogue(a, b, bias):
    if a.ndim != 2 or b.ndim != 2 or bias.ndim != 1 or a.shape[1] != b.shape[0] or b.shape[1] != bias.shape[0]:
        raise ValueError(f"bad shapes {tuple(a.shape)} {tuple(b.shape)} {tuple(bias.shape)}")
    if a.dtype not in (torch.float16, torch.bfloat16) or len({a.dtype, b.dtype, bias.dtype}) != 1:
        raise TypeError("float16 or bfloat16, one dtype")
    if len({a.device, b.device, bias.device}) != 1:
        raise ValueError("one device")
    if any(t.requires_grad for t in (a, b, bias)):
        raise ValueError("inputs must not require grad")
    M, K = a.shape
    N = b.shape[1]
    out = torch.empty((M, N), dtype=a.dtype, device=a.device)
    BM, BN, BK = 64, 64, 32
    _kernel[(triton.cdiv(M, BM), triton.cdiv(N, BN))](a, b, bias, out, M, N, K, a.stride(0), a.stride(1),
                                                      b.stride(0), b.stride(1), bias.stride(0), out.stride(0),
                                                      out.stride(1), BM=BM, BN=BN, BK=BK)
    return out
