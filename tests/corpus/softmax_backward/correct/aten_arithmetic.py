"""softmax_backward with the arithmetic of PyTorch's CUDA softmax backward: each product
p = y*g is rounded to the input dtype, summed in fp32, and dx = p - y * sum(p).

The assignment allows products formed in fp32 or rounded to the input dtype (docs/checks.md,
half_precision); this file takes the second road, so its fp16/bf16 outputs differ from an
fp32-product kernel's by the rounding of p, which the checks' slack term covers, in the checks
and in the benchmark's verification of every timed output alike. Chunked loop over the row,
one program per row, any strides.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _aten_style(y_ptr, g_ptr, dx_ptr, n_cols, sy0, sy1, sg0, sg1, sd0, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offsets = tl.arange(0, BLOCK)
    total = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + offsets
        mask = cols < n_cols
        y = tl.load(y_ptr + row * sy0 + cols * sy1, mask=mask, other=0.0)
        g = tl.load(g_ptr + row * sg0 + cols * sg1, mask=mask, other=0.0)
        product = (y.to(tl.float32) * g.to(tl.float32)).to(y.dtype).to(tl.float32)
        total += product
    dot = tl.sum(total, axis=0)
    for start in range(0, n_cols, BLOCK):
        cols = start + offsets
        mask = cols < n_cols
        y = tl.load(y_ptr + row * sy0 + cols * sy1, mask=mask, other=0.0)
        g = tl.load(g_ptr + row * sg0 + cols * sg1, mask=mask, other=0.0)
        product = (y.to(tl.float32) * g.to(tl.float32)).to(y.dtype).to(tl.float32)
        dx = product - y.to(tl.float32) * dot
        tl.store(dx_ptr + row * sd0 + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


def softmax_backward(y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    if not isinstance(y, torch.Tensor) or not isinstance(g, torch.Tensor):
        raise TypeError("y and g must be tensors")
    if y.dim() != 2 or y.shape != g.shape:
        raise ValueError(f"y and g must be 2-D of one shape: {tuple(y.shape)} vs {tuple(g.shape)}")
    if y.dtype != g.dtype or y.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"unsupported or mismatched dtypes: {y.dtype}, {g.dtype}")
    if y.device != g.device:
        raise ValueError("y and g are on different devices")
    if y.requires_grad or g.requires_grad:
        raise ValueError("y and g must not require grad")
    n_rows, n_cols = y.shape
    dx = torch.empty((n_rows, n_cols), dtype=y.dtype, device=y.device)
    if n_rows and n_cols:
        block = min(4096, triton.next_power_of_2(n_cols))
        _aten_style[(n_rows,)](y, g, dx, n_cols, y.stride(0), y.stride(1), g.stride(0), g.stride(1), dx.stride(0),
                               BLOCK=block, num_warps=8 if block >= 2048 else 4)
    return dx
