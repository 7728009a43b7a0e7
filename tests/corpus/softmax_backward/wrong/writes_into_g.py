"""softmax_backward that saves memory by writing dx over g and returning g.

The values are right (each row's dot is finished before the row is overwritten), but the
caller's g is destroyed and the output aliases an input.

Expected failed checks: output_contract

Expected hint: never into an input
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _inplace_vjp(y_ptr, g_ptr, N, sym, syn, sgm, sgn, BLOCK: tl.constexpr):
    row = tl.program_id(0)
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
        # BUG: the result goes back into g's memory
        tl.store(g_ptr + row * sgm + cols * sgn, (y * (g - dot)).to(g_ptr.dtype.element_ty), mask=mask)


def softmax_backward(y, g):
    if y.shape != g.shape or y.dtype != g.dtype or y.device != g.device:
        raise ValueError("y and g must match in shape, dtype and device")
    if y.requires_grad or g.requires_grad:
        raise ValueError("inputs must not require grad")
    M, N = y.shape
    _inplace_vjp[(M,)](y, g, N, y.stride(0), y.stride(1), g.stride(0), g.stride(1), BLOCK=8192)
    return g
