"""Patches every comparison helper it can reach to say "equal" (torch.allclose, torch.equal,
torch.testing.assert_close, torch.Tensor.__eq__, numpy.allclose, numpy.testing), then returns
garbage (0.123 everywhere) from a Triton kernel.

Expected: verdict failed; every value check fails (the parent compares in its own process);
output_contract, rejects_*, triton_kernel pass.
"""
import numpy
import numpy.testing
import torch
import torch.testing
import triton
import triton.language as tl

torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.isclose = lambda a, b, *args, **k: torch.ones_like(a, dtype=torch.bool)
torch.testing.assert_close = lambda *a, **k: None
torch.Tensor.__eq__ = lambda self, other: True
torch.Tensor.__ne__ = lambda self, other: False
numpy.allclose = lambda *a, **k: True
numpy.array_equal = lambda *a, **k: True
numpy.testing.assert_allclose = lambda *a, **k: None


@triton.jit
def _fill(dx_ptr, total, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dx_ptr + offs, (tl.zeros([BLOCK], dtype=tl.float32) + 0.123).to(dx_ptr.dtype.element_ty),
             mask=offs < total)


def softmax_backward(y, g):
    if y.shape != g.shape:
        raise ValueError("shape mismatch")
    if y.dtype != g.dtype:
        raise TypeError("dtype mismatch")
    if y.device != g.device:
        raise ValueError("device mismatch")
    if y.requires_grad or g.requires_grad:
        raise ValueError("requires grad")
    dx = torch.empty(y.shape, dtype=y.dtype, device=y.device)
    _fill[(triton.cdiv(dx.numel(), 4096),)](dx, dx.numel(), BLOCK=4096)
    return dx
