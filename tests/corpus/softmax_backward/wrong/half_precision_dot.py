"""softmax_backward that keeps its running dot product in fp16 for fp16 inputs.

A looped row kernel: each 128-column chunk (fp16) is reduced in fp32, but the partial sums are added
into a running total of the input's precision when the input is fp16 ("fp16 in, fp16 math").
On long rows the total grows to |dot| ~ 3 while each chunk adds ~0.006, so every addition
rounds to an fp16 ulp of the total (2^-9 near 3) and the error in dot, times y, shows.
fp32 and bf16 inputs use an fp32 total and are right.

Expected failed checks: half_precision, strided_inputs

Expected hint: accumulate y*g in fp32
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _bwd(y_ptr, g_ptr, dx_ptr, N, sym, syn, sgm, sgn, sdm, BLOCK: tl.constexpr, ACC: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    dot = tl.zeros([1], dtype=ACC)
    for start in range(0, N, BLOCK):
        cols = start + offs
        m = cols < N
        y = tl.load(y_ptr + row * sym + cols * syn, mask=m, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * sgm + cols * sgn, mask=m, other=0.0).to(tl.float32)
        dot += tl.sum(y * g, axis=0).to(ACC)  # BUG: the running total is rounded to ACC each step
    d = tl.sum(dot.to(tl.float32), axis=0)
    for start in range(0, N, BLOCK):
        cols = start + offs
        m = cols < N
        y = tl.load(y_ptr + row * sym + cols * syn, mask=m, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * sgm + cols * sgn, mask=m, other=0.0).to(tl.float32)
        tl.store(dx_ptr + row * sdm + cols, (y * (g - d)).to(dx_ptr.dtype.element_ty), mask=m)


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
    half = y.dtype == torch.float16
    acc = tl.float16 if half else tl.float32
    block = 128 if half else 4096  # small chunks for fp16 "to save registers"
    _bwd[(M,)](y, g, dx, N, y.stride(0), y.stride(1), g.stride(0), g.stride(1), dx.stride(0), BLOCK=block, ACC=acc)
    return dx
