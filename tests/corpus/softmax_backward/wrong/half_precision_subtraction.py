"""softmax_backward that reduces in fp32 but subtracts and multiplies in the input dtype.

The row sum dot = sum(y*g) is accumulated correctly in fp32, but the kernel then computes
dx = y * (g - dot) in the input's precision: dot is rounded to float16/bfloat16 before the
subtraction ("fp16 in, fp16 math"). That rounding moves every element of a row by up to half
an ulp of |dot|, far more than the one rounding of the result the assignment allows. float32
inputs are right; the float16 case of strided_inputs shows it too.

Expected failed checks: half_precision, strided_inputs

Expected hint: rounded to float16 before the subtraction
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _bwd(y_ptr, g_ptr, dx_ptr, N, sym, syn, sgm, sgn, sdm, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + offs
        m = cols < N
        y = tl.load(y_ptr + row * sym + cols * syn, mask=m, other=0.0)
        g = tl.load(g_ptr + row * sgm + cols * sgn, mask=m, other=0.0)
        acc += y.to(tl.float32) * g.to(tl.float32)
    dot = tl.sum(acc, axis=0)
    for start in range(0, N, BLOCK):
        cols = start + offs
        m = cols < N
        y = tl.load(y_ptr + row * sym + cols * syn, mask=m, other=0.0)
        g = tl.load(g_ptr + row * sgm + cols * sgn, mask=m, other=0.0)
        dx = y * (g - dot.to(y.dtype))  # BUG: dot rounded to the input dtype, math in half precision
        tl.store(dx_ptr + row * sdm + cols, dx.to(dx_ptr.dtype.element_ty), mask=m)


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
    dx = torch.empty((M, N), dtype=y.dtype, device=y.device)
    _bwd[(M,)](y, g, dx, N, y.stride(0), y.stride(1), g.stride(0), g.stride(1), dx.stride(0), BLOCK=1024)
    return dx
