"""softmax_backward written in plain PyTorch: right values, but no Triton kernel at all.

Expected failed checks: triton_kernel

Expected hint: launched no
"""
import torch


def softmax_backward(y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    if y.shape != g.shape:
        raise ValueError(f"shape mismatch {tuple(y.shape)} vs {tuple(g.shape)}")
    if y.dtype != g.dtype:
        raise TypeError(f"dtype mismatch {y.dtype} vs {g.dtype}")
    if y.device != g.device:
        raise ValueError(f"device mismatch {y.device} vs {g.device}")
    if y.requires_grad or g.requires_grad:
        raise ValueError("pass detached tensors")
    y32 = y.float()
    g32 = g.float()
    dot = (y32 * g32).sum(dim=-1, keepdim=True)
    return (y32 * (g32 - dot)).to(y.dtype).contiguous()
