"""softmax_backward with a chunked loop over each row: one program per row, two passes.

dx = y * (g - sum(y*g, dim=-1, keepdim=True)) for 2-D y, g (M, N), float32/float16/bfloat16,
any strides. Pass 1 walks the row in CHUNK-element chunks and accumulates y*g in a vector of
fp32 lanes; pass 2 walks it again and writes dx. One block size for every row length, so one
compilation per dtype and layout; y and g are read twice (5 memory accesses per element).
"""
import torch
import triton
import triton.language as tl

CHUNK = 2048


@triton.jit
def _vjp_looped(y_ptr, g_ptr, dx_ptr, N, stride_ym, stride_yn, stride_gm, stride_gn, stride_dxm,
                CHUNK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    y_row = y_ptr + row * stride_ym
    g_row = g_ptr + row * stride_gm
    dx_row = dx_ptr + row * stride_dxm
    offsets = tl.arange(0, CHUNK)
    acc = tl.zeros([CHUNK], dtype=tl.float32)
    for start in range(0, N, CHUNK):
        cols = start + offsets
        inside = cols < N
        y = tl.load(y_row + cols * stride_yn, mask=inside, other=0.0).to(tl.float32)
        g = tl.load(g_row + cols * stride_gn, mask=inside, other=0.0).to(tl.float32)
        acc += y * g
    dot = tl.sum(acc, axis=0)
    for start in range(0, N, CHUNK):
        cols = start + offsets
        inside = cols < N
        y = tl.load(y_row + cols * stride_yn, mask=inside, other=0.0).to(tl.float32)
        g = tl.load(g_row + cols * stride_gn, mask=inside, other=0.0).to(tl.float32)
        tl.store(dx_row + cols, (y * (g - dot)).to(dx_ptr.dtype.element_ty), mask=inside)


def _check_inputs(y, g) -> None:
    if not isinstance(y, torch.Tensor) or not isinstance(g, torch.Tensor):
        raise TypeError("softmax_backward expects two torch.Tensor arguments")
    if y.dim() != 2 or y.shape != g.shape:
        raise ValueError(f"y and g must be 2-D of one shape, got {tuple(y.shape)} and {tuple(g.shape)}")
    if y.dtype != g.dtype or y.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"y and g must share a dtype among float32/float16/bfloat16, got {y.dtype} and {g.dtype}")
    if y.device != g.device:
        raise ValueError(f"y is on {y.device} but g is on {g.device}")
    if y.requires_grad or g.requires_grad:
        raise ValueError("pass detached tensors: this VJP is not an autograd function")


def softmax_backward(y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """dx (M, N) of y's dtype, a fresh contiguous tensor; raises TypeError/ValueError on bad inputs."""
    _check_inputs(y, g)
    m, n = y.shape
    dx = torch.empty((m, n), dtype=y.dtype, device=y.device)
    if m and n:
        _vjp_looped[(m,)](y, g, dx, n, y.stride(0), y.stride(1), g.stride(0), g.stride(1), dx.stride(0),
                          CHUNK=CHUNK, num_warps=8)
    return dx
