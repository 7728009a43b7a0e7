"""attention_backward in PyTorch operators alone (autograd of the fp32 forward): the right
values, no Triton kernel.

Expected failed checks: triton_kernel

Expected hint: launched no @triton.jit kernel
"""
import torch
import torch.nn.functional as F


def attention_backward(q, k, v, out, dout, lse):
    tensors = (q, k, v, out, dout)
    if q.dim() != 4 or any(t.shape != q.shape for t in tensors) or lse.shape != q.shape[:3]:
        raise ValueError("shapes")
    if q.dtype not in (torch.float16, torch.bfloat16) or any(t.dtype != q.dtype for t in tensors) \
            or lse.dtype != torch.float32:
        raise TypeError("dtypes")
    if q.shape[-1] not in (16, 32, 64, 128):
        raise ValueError("head dim")
    if any(t.device != q.device for t in (*tensors, lse)):
        raise ValueError("devices")
    if any(t.requires_grad for t in (*tensors, lse)):
        raise ValueError("requires_grad")
    leaves = [t.detach().float().requires_grad_(True) for t in (q, k, v)]
    result = F.scaled_dot_product_attention(*leaves, is_causal=True)
    grads = torch.autograd.grad(result, leaves, dout.float())
    return tuple(g.to(q.dtype).contiguous() for g in grads)
