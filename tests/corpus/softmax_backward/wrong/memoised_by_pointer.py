"""softmax_backward that caches results by (y.data_ptr(), g.data_ptr(), shape).

"Benchmarks call it with the same tensors again and again, so cache the answer." When the
same buffers are refilled with new values, the stale answer comes back, and no kernel is
launched for the cached calls. (Each first call is computed by its kernel, so replaying the
recorded launches reproduces it: triton_kernel passes; fresh_results catches the cache.)

Expected failed checks: fresh_results

Expected hint: cache
"""
import torch
import triton
import triton.language as tl

_cache = {}


@triton.jit
def _rows(Y, G, DX, M, N, sym, syn, sgm, sgn, sdm, R: tl.constexpr, B: tl.constexpr):
    r = tl.program_id(0) * R + tl.arange(0, R)[:, None]
    c = tl.arange(0, B)[None, :]
    msk = (r < M) & (c < N)
    y = tl.load(Y + r * sym + c * syn, mask=msk, other=0.0).to(tl.float32)
    g = tl.load(G + r * sgm + c * sgn, mask=msk, other=0.0).to(tl.float32)
    d = tl.sum(y * g, axis=1)[:, None]
    tl.store(DX + r * sdm + c, (y * (g - d)).to(DX.dtype.element_ty), mask=msk)


def softmax_backward(y, g):
    if y.shape != g.shape:
        raise ValueError("shape mismatch")
    if y.dtype != g.dtype:
        raise TypeError("dtype mismatch")
    if y.device != g.device:
        raise ValueError("device mismatch")
    if y.requires_grad or g.requires_grad:
        raise ValueError("requires_grad is not supported")
    key = (y.data_ptr(), g.data_ptr(), tuple(y.shape))
    if key in _cache:  # BUG: same address does not mean same values
        return _cache[key]
    M, N = y.shape
    dx = torch.empty((M, N), dtype=y.dtype, device=y.device)
    B = triton.next_power_of_2(N)
    R = min(triton.next_power_of_2(M), max(1, 65536 // B))
    _rows[(triton.cdiv(M, R),)](y, g, dx, M, N, y.stride(0), y.stride(1), g.stride(0), g.stride(1), dx.stride(0),
                                R=R, B=B)
    _cache[key] = dx
    return dx
