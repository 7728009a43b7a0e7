"""softmax_backward that accumulates y*g in an fp16 vector accumulator for fp16 inputs.

The correct looped kernel with one change: `acc` has the input's dtype when that is fp16, so
each of the BLOCK lanes sums its N/BLOCK products in fp16 before the final reduction. The
assignment asks for an fp32 reduction ("convert both to FP32 before multiplying; reduce their
product once"). fp32 and bf16 inputs use an fp32 accumulator and are right.

On rows of at most 1024 columns each lane holds a single product rounded to fp16, which is
exactly what PyTorch's own CUDA softmax backward does, so those rows pass. The rows with exactly
representable products (half_precision, and strided_inputs' fp16 case, 4096 columns) show the
fp16 additions: 2 to 100 times what an fp32 sum can be off by.

Expected failed checks: half_precision, strided_inputs

Expected hint: accumulate y*g in fp32
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _row_kernel(y_ptr, g_ptr, dx_ptr, N, sym, syn, sgm, sgn, sdm, BLOCK: tl.constexpr, ACC: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=ACC)
    for start in range(0, N, BLOCK):
        cols = start + offs
        mask = cols < N
        y = tl.load(y_ptr + row * sym + cols * syn, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * sgm + cols * sgn, mask=mask, other=0.0).to(tl.float32)
        acc += (y * g).to(ACC)  # BUG: fp16 accumulator for fp16 inputs
    dot = tl.sum(acc.to(tl.float32), axis=0)
    for start in range(0, N, BLOCK):
        cols = start + offs
        mask = cols < N
        y = tl.load(y_ptr + row * sym + cols * syn, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * sgm + cols * sgn, mask=mask, other=0.0).to(tl.float32)
        tl.store(dx_ptr + row * sdm + cols, (y * (g - dot)).to(dx_ptr.dtype.element_ty), mask=mask)


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
    acc = tl.float16 if y.dtype == torch.float16 else tl.float32
    _row_kernel[(M,)](y, g, dx, N, y.stride(0), y.stride(1), g.stride(0), g.stride(1), dx.stride(0),
                      BLOCK=1024, ACC=acc)
    return dx
