"""softmax_backward that allocates its output with torch.empty_like(y).

The values are right (the kernel writes dx through dx's own strides), but empty_like keeps
y's layout: for a transposed y the output is transposed too, not the fresh contiguous tensor
the assignment asks for. Contiguous inputs hide it.

Expected failed checks: output_contract

Expected hint: empty_like
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _bwd(y_ptr, g_ptr, dx_ptr, N, sym, syn, sgm, sgn, sdm, sdn, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + offs
        m = cols < N
        y = tl.load(y_ptr + row * sym + cols * syn, mask=m, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * sgm + cols * sgn, mask=m, other=0.0).to(tl.float32)
        acc += y * g
    dot = tl.sum(acc, axis=0)
    for start in range(0, N, BLOCK):
        cols = start + offs
        m = cols < N
        y = tl.load(y_ptr + row * sym + cols * syn, mask=m, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * sgm + cols * sgn, mask=m, other=0.0).to(tl.float32)
        tl.store(dx_ptr + row * sdm + cols * sdn, (y * (g - dot)).to(dx_ptr.dtype.element_ty), mask=m)


def softmax_backward(y, g):
    if y.shape != g.shape:
        raise ValueError("shape mismatch")
    if y.dtype != g.dtype:
        raise TypeError("dtype mismatch")
    if y.device != g.device:
        raise ValueError("device mismatch")
    if y.requires_grad or g.requires_grad:
        raise ValueError("requires grad")
    M, N = y.shape
    dx = torch.empty_like(y)  # BUG: keeps y's strides (transposed y -> transposed dx)
    _bwd[(M,)](y, g, dx, N, y.stride(0), y.stride(1), g.stride(0), g.stride(1), dx.stride(0), dx.stride(1),
               BLOCK=2048)
    return dx
