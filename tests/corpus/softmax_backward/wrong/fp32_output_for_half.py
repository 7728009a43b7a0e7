"""softmax_backward that always returns float32 ("more precise"), even for fp16/bf16 inputs.

The values are right; the contract says the output keeps the input dtype.

Expected failed checks: half_precision, strided_inputs, output_contract

Expected hint: came back as float32
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _vjp_kernel(y_ptr, g_ptr, dx_ptr, n, sy0, sy1, sg0, sg1, sd0, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for c in range(0, tl.cdiv(n, BLOCK)):
        cols = c * BLOCK + tl.arange(0, BLOCK)
        m = cols < n
        acc += tl.load(y_ptr + row * sy0 + cols * sy1, mask=m, other=0.0).to(tl.float32) * \
            tl.load(g_ptr + row * sg0 + cols * sg1, mask=m, other=0.0).to(tl.float32)
    dot = tl.sum(acc, axis=0)
    for c in range(0, tl.cdiv(n, BLOCK)):
        cols = c * BLOCK + tl.arange(0, BLOCK)
        m = cols < n
        yv = tl.load(y_ptr + row * sy0 + cols * sy1, mask=m, other=0.0).to(tl.float32)
        gv = tl.load(g_ptr + row * sg0 + cols * sg1, mask=m, other=0.0).to(tl.float32)
        tl.store(dx_ptr + row * sd0 + cols, yv * (gv - dot), mask=m)


def softmax_backward(y, g):
    if y.shape != g.shape:
        raise ValueError("shape mismatch")
    if y.dtype != g.dtype:
        raise TypeError("dtype mismatch")
    if y.device != g.device:
        raise ValueError("device mismatch")
    if y.requires_grad or g.requires_grad:
        raise ValueError("requires_grad inputs are not supported")
    m, n = y.shape
    dx = torch.empty((m, n), dtype=torch.float32, device=y.device)  # BUG: should be y.dtype
    _vjp_kernel[(m,)](y, g, dx, n, y.stride(0), y.stride(1), g.stride(0), g.stride(1), dx.stride(0), BLOCK=4096)
    return dx
