"""Correct softmax_backward that forgets to reject inputs that require grad.

A looped row kernel with a full set of shape/dtype/device checks, but a y or g with
requires_grad=True is silently accepted (the spec asks for an error: this is an explicit VJP,
not an autograd function).

Expected failed checks: rejects_requires_grad

Expected hint: requires grad
"""
import torch
import triton
import triton.language as tl


@triton.jit
def row_vjp(y_ptr, g_ptr, dx_ptr, n, y_rs, y_cs, g_rs, g_cs, dx_rs, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    y_row = y_ptr + pid * y_rs
    g_row = g_ptr + pid * g_rs
    partial = tl.zeros([BLOCK], dtype=tl.float32)
    for off in range(0, n, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        valid = cols < n
        partial += tl.load(y_row + cols * y_cs, mask=valid, other=0.0).to(tl.float32) * \
            tl.load(g_row + cols * g_cs, mask=valid, other=0.0).to(tl.float32)
    dot = tl.sum(partial, axis=0)
    for off in range(0, n, BLOCK):
        cols = off + tl.arange(0, BLOCK)
        valid = cols < n
        yv = tl.load(y_row + cols * y_cs, mask=valid, other=0.0).to(tl.float32)
        gv = tl.load(g_row + cols * g_cs, mask=valid, other=0.0).to(tl.float32)
        tl.store(dx_ptr + pid * dx_rs + cols, (yv * (gv - dot)).to(dx_ptr.dtype.element_ty), mask=valid)


def softmax_backward(y, g):
    if y.dim() != 2 or y.shape != g.shape:
        raise ValueError("y and g must be 2-D with the same shape")
    if y.dtype != g.dtype:
        raise TypeError("y and g must have the same dtype")
    if y.device != g.device:
        raise ValueError("y and g must live on the same device")
    # (no requires_grad check: the kernel reads raw pointers, so it "works" anyway)
    m, n = y.shape
    dx = torch.empty((m, n), dtype=y.dtype, device=y.device)
    row_vjp[(m,)](y, g, dx, n, y.stride(0), y.stride(1), g.stride(0), g.stride(1), dx.stride(0), BLOCK=4096)
    return dx
