"""gemm_epilogue as split-K (tests/corpus/gemm_epilogue/correct/split_k_two_kernels.py) whose
split programs return early when their slice of K is empty, leaving their partial tile of the
torch.empty scratch unwritten; the epilogue sums every split. For small K the sum takes in
whatever memory empty returned: zeros on one run (a pass), garbage on another. The check child
fills such memory with one recognisable NaN, so every run fails the same checks and names the
cause.

Expected failed checks: example_small, float16_values, epilogue_values, strided_inputs, edge_shapes, fresh_results

Expected hint: never written
"""
import torch
import triton
import triton.language as tl

SPLIT = 4


@triton.jit
def _partial(a_ptr, b_ptr, ws_ptr, M, N, K, sam, sak, sbk, sbn, K_PER: tl.constexpr,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    pid_m, pid_n, s = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    if s * K_PER >= K:  # nothing of K left for this split: the bug, its partial tile stays unwritten
        return
    rm = pid_m * BM + tl.arange(0, BM)
    rn = pid_n * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k0 in range(s * K_PER, s * K_PER + K_PER, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(a_ptr + rm[:, None] * sam + rk[None, :] * sak, mask=(rm[:, None] < M) & (rk[None, :] < K), other=0.0)
        b = tl.load(b_ptr + rk[:, None] * sbk + rn[None, :] * sbn, mask=(rk[:, None] < K) & (rn[None, :] < N), other=0.0)
        acc += tl.dot(a, b)
    tl.store(ws_ptr + s * M * N + rm[:, None] * N + rn[None, :], acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _epilogue(ws_ptr, bias_ptr, out_ptr, M, N, sbias, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < M * N
    z = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(SPLIT):
        z += tl.load(ws_ptr + s * M * N + offs, mask=mask, other=0.0)
    z += tl.load(bias_ptr + (offs % N) * sbias, mask=mask, other=0.0).to(tl.float32)
    y = 0.7978845608028654 * (z + 0.044715 * z * z * z)
    tl.store(out_ptr + offs, (z * tl.sigmoid(2.0 * y)).to(out_ptr.dtype.element_ty), mask=mask)


def gemm_epilogue(a, b, bias):
    if a.dim() != 2 or b.dim() != 2 or bias.shape != (b.shape[-1],) or a.shape[1] != b.shape[0]:
        raise ValueError("need a (M, K), b (K, N), bias (N,)")
    if a.dtype not in (torch.float16, torch.bfloat16) or b.dtype != a.dtype or bias.dtype != a.dtype:
        raise TypeError("one dtype: float16 or bfloat16")
    if b.device != a.device or bias.device != a.device:
        raise ValueError("one device")
    if a.requires_grad or b.requires_grad or bias.requires_grad:
        raise ValueError("requires_grad inputs are not supported")
    M, K = a.shape
    N = b.shape[1]
    BM, BN, BK = 32, 32, 32
    k_per = triton.cdiv(triton.cdiv(K, SPLIT), BK) * BK
    ws = torch.empty((SPLIT, M, N), dtype=torch.float32, device=a.device)
    _partial[(triton.cdiv(M, BM), triton.cdiv(N, BN), SPLIT)](a, b, ws, M, N, K, a.stride(0), a.stride(1),
                                                              b.stride(0), b.stride(1), K_PER=k_per, BM=BM, BN=BN, BK=BK)
    out = torch.empty((M, N), dtype=a.dtype, device=a.device)
    BLOCK = 1024
    _epilogue[(triton.cdiv(M * N, BLOCK),)](ws, bias, out, M, N, bias.stride(0), SPLIT=SPLIT, BLOCK=BLOCK)
    return out
