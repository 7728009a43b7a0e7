"""gemm_epilogue computed with PyTorch operators in fp32 and a token Triton kernel that only copies
the result: the values are right, but the work is not done by the Triton launches, so
replaying them alone on new inputs copies a buffer nobody refilled.

Expected failed checks: triton_kernel

Expected hint: outside triton
"""
import torch
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


def gemm_epilogue(a, b, bias):
    if a.dim() != 2 or b.dim() != 2 or bias.dim() != 1 or a.shape[1] != b.shape[0] or bias.shape[0] != b.shape[1]:
        raise ValueError("need a (M, K), b (K, N), bias (N,)")
    if a.dtype not in (torch.float16, torch.bfloat16) or b.dtype != a.dtype or bias.dtype != a.dtype:
        raise TypeError("one dtype, float16 or bfloat16")
    if a.device != b.device or a.device != bias.device:
        raise ValueError("one device")
    if a.requires_grad or b.requires_grad or bias.requires_grad:
        raise ValueError("inputs must not require grad")
    result = F.gelu(a.float() @ b.float() + bias.float(), approximate="tanh").to(a.dtype).contiguous()
    out = torch.empty_like(result)
    _copy[(triton.cdiv(out.numel(), 1024),)](result, out, out.numel(), BLOCK=1024)
    return out
