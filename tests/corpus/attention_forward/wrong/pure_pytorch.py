"""attention_forward in PyTorch operators alone: the right values, no Triton kernel.

Expected failed checks: triton_kernel

Expected hint: launched no @triton.jit kernel
"""
import torch
import torch.nn.functional as F


def attention_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    if q.dim() != 4 or k.shape != q.shape or v.shape != q.shape:
        raise ValueError("q, k, v must be one (B, H, S, D) shape")
    if q.dtype not in (torch.float16, torch.bfloat16) or k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError("float16 or bfloat16, one dtype")
    if q.shape[-1] not in (16, 32, 64, 128):
        raise ValueError("D must be 16, 32, 64 or 128")
    if k.device != q.device or v.device != q.device:
        raise ValueError("one device")
    if q.requires_grad or k.requires_grad or v.requires_grad:
        raise ValueError("no autograd")
    out = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), is_causal=True)
    return out.to(q.dtype).contiguous()
