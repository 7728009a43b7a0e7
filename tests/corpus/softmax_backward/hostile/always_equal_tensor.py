"""Returns a torch.Tensor subclass whose ==, != , equal, allclose and isclose always say
"equal", holding garbage (1.0 everywhere, written by a Triton kernel).

Expected: verdict failed; every value check fails (the parent reads the bytes back as a plain
tensor); output_contract, rejects_*, triton_kernel pass.
"""
import torch
import triton
import triton.language as tl


class AlwaysEqualTensor(torch.Tensor):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = torch.Tensor.__hash__

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.equal, torch.allclose, torch.Tensor.equal, torch.Tensor.allclose):
            return True
        if func in (torch.isclose, torch.Tensor.isclose, torch.eq, torch.Tensor.eq):
            return torch.ones(args[0].shape, dtype=torch.bool)
        return super().__torch_function__(func, types, args, kwargs)


@triton.jit
def _ones(dx_ptr, total, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dx_ptr + offs, (tl.zeros([BLOCK], dtype=tl.float32) + 1.0).to(dx_ptr.dtype.element_ty),
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
    _ones[(triton.cdiv(dx.numel(), 4096),)](dx, dx.numel(), BLOCK=4096)
    return dx.as_subclass(AlwaysEqualTensor)
