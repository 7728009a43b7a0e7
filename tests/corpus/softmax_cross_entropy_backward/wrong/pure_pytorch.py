"""softmax_cross_entropy_backward in plain PyTorch: correct values, but no Triton kernel.

The assignment is to write the kernel; torch.softmax and a scatter do not count.

Expected failed checks: triton_kernel

Expected hint: launched no
"""
import torch


def softmax_cross_entropy_backward(x, t, grad, ignore_index=-100):
    for name, value in (("x", x), ("t", t), ("grad", grad)):
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor")
    if x.dim() != 2 or x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError("x must be a 2-D float32/float16/bfloat16 tensor")
    if t.dtype != torch.int64 or t.shape != (x.shape[0],):
        raise ValueError(f"t must be int64 of shape ({x.shape[0]},)")
    if grad.shape != () or grad.dtype != torch.float32:
        raise ValueError("grad must be a 0-d float32 tensor")
    if t.device != x.device or grad.device != x.device:
        raise ValueError("x, t and grad must be on one device")
    if x.requires_grad or grad.requires_grad:
        raise ValueError("inputs must not require grad")
    c = x.shape[1]
    valid = t != ignore_index
    if bool((valid & ((t < 0) | (t >= c))).any()):
        raise ValueError("target out of range")
    p = torch.softmax(x.float(), dim=-1)
    onehot = torch.zeros_like(p).scatter_(1, torch.where(valid, t, 0).unsqueeze(1), 1.0)
    scale = torch.where(valid, grad / valid.sum().clamp(min=1), 0.0)
    return ((p - onehot) * scale.unsqueeze(1)).to(x.dtype).contiguous()
