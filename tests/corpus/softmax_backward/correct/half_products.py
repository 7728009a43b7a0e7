"""Correct softmax_backward that forms the products y*g in the input's dtype, as PyTorch's
CUDA kernel does (aten PersistentSoftmax.cuh / SoftMax.cu: gradInput = grad*output -
output*sum): p = y*g rounded to float16/bfloat16, s = the row's fp32 sum of p, dx = p - y*s
in fp32, rounded once to the output dtype. docs/checks.md allows exactly this arithmetic.

Under the CPU interpreter, bf16 products are where Triton 3.6's interpreter went wrong (it
multiplied bf16 bit patterns as integers: 0.75 x -1 gave 3.7e19); the grader's child routes
them through fp32 (grader/harness/interpreter_bf16.py), so this file passes on the CPU too.
"""
import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _row_kernel(y_ptr, g_ptr, dx_ptr, N, sym, syn, sgm, sgn, sdm, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK).to(tl.int64)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + offs
        mask = cols < N
        y = tl.load(y_ptr + row * sym + cols * syn, mask=mask, other=0.0)
        g = tl.load(g_ptr + row * sgm + cols * sgn, mask=mask, other=0.0)
        acc += (y * g).to(tl.float32)  # the product in the input's dtype, summed in fp32
    total = tl.sum(acc, axis=0)
    for start in range(0, N, BLOCK):
        cols = start + offs
        mask = cols < N
        y = tl.load(y_ptr + row * sym + cols * syn, mask=mask, other=0.0)
        g = tl.load(g_ptr + row * sgm + cols * sgn, mask=mask, other=0.0)
        dx = (y * g).to(tl.float32) - y.to(tl.float32) * total
        tl.store(dx_ptr + row * sdm + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def softmax_backward(y, g):
    if not isinstance(y, torch.Tensor) or not isinstance(g, torch.Tensor):
        raise TypeError("y and g must be torch.Tensor")
    if y.dim() != 2 or g.dim() != 2:
        raise ValueError(f"y and g must be 2-D, got {y.dim()}-D and {g.dim()}-D")
    if y.shape != g.shape:
        raise ValueError(f"shape mismatch: {tuple(y.shape)} vs {tuple(g.shape)}")
    if y.dtype != g.dtype:
        raise TypeError(f"dtype mismatch: {y.dtype} vs {g.dtype}")
    if y.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"unsupported dtype {y.dtype}")
    if y.device != g.device:
        raise ValueError(f"device mismatch: {y.device} vs {g.device}")
    if y.requires_grad or g.requires_grad:
        raise ValueError("inputs must not require grad")
    m, n = y.shape
    dx = torch.empty((m, n), dtype=y.dtype, device=y.device)
    if m == 0 or n == 0:
        return dx
    _row_kernel[(m,)](y, g, dx, n, y.stride(0), y.stride(1), g.stride(0), g.stride(1), dx.stride(0),
                      BLOCK=BLOCK, num_warps=4)
    return dx
