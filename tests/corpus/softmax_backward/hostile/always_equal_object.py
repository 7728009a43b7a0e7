"""Returns an object that claims to equal anything and looks a bit like a tensor.

Expected: verdict failed; every value check, output_contract and triton_kernel fail (no call
returned a tensor); the rejects_* checks pass (it validates its inputs).
"""
import torch


class AlwaysEqual:
    shape = None
    dtype = torch.float32

    def __init__(self, like):
        self.shape = like.shape
        self.dtype = like.dtype
        self.device = like.device

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __bool__(self):
        return True

    def __getattr__(self, name):
        return lambda *a, **k: self

    __hash__ = object.__hash__


def softmax_backward(y, g):
    if y.shape != g.shape:
        raise ValueError("shape mismatch")
    if y.dtype != g.dtype:
        raise TypeError("dtype mismatch")
    if y.device != g.device:
        raise ValueError("device mismatch")
    if y.requires_grad or g.requires_grad:
        raise ValueError("requires grad")
    return AlwaysEqual(y)
