"""Computes dx correctly with a Triton kernel, then returns it as a torch.Tensor subclass whose
detach() answers a plain object: the harness's description of the output (detach, as_subclass,
strides) fails on it. That used to end the child at the first call: an "exited" error with
advice about sys.exit and no check graded. Now it is a call that returned no usable tensor.

Expected: verdict failed; every value check, output_contract and triton_kernel fail (no call
returned a usable tensor); the rejects_* checks pass.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _vjp_rows(y_ptr, g_ptr, dx_ptr, N, sym, syn, sgm, sgn, sdm, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + offs
        mask = cols < N
        y = tl.load(y_ptr + row * sym + cols * syn, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * sgm + cols * sgn, mask=mask, other=0.0).to(tl.float32)
        acc += y * g
    dot = tl.sum(acc, axis=0)
    for start in range(0, N, BLOCK):
        cols = start + offs
        mask = cols < N
        y = tl.load(y_ptr + row * sym + cols * syn, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * sgm + cols * sgn, mask=mask, other=0.0).to(tl.float32)
        tl.store(dx_ptr + row * sdm + cols, (y * (g - dot)).to(dx_ptr.dtype.element_ty), mask=mask)


def _checked_vjp(y, g):
    if not isinstance(y, torch.Tensor) or not isinstance(g, torch.Tensor):
        raise TypeError("y and g must be tensors")
    if y.dim() != 2 or y.shape != g.shape:
        raise ValueError("y and g must be 2-D of the same shape")
    if y.dtype != g.dtype:
        raise TypeError("dtype mismatch")
    if y.device != g.device:
        raise ValueError("device mismatch")
    if y.requires_grad or g.requires_grad:
        raise ValueError("inputs must not require grad")
    m, n = y.shape
    dx = torch.empty((m, n), dtype=y.dtype, device=y.device)
    _vjp_rows[(m,)](y, g, dx, n, y.stride(0), y.stride(1), g.stride(0), g.stride(1), dx.stride(0), BLOCK=4096)
    return dx


class Lying(torch.Tensor):
    """A tensor that answers detach() with something that is not one."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") == "detach":
            return object()
        return super().__torch_function__(func, types, args, kwargs or {})


def softmax_backward(y, g):
    return _checked_vjp(y, g).as_subclass(Lying)
