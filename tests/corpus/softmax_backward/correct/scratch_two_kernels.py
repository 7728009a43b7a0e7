"""softmax_backward with two kernels and a scratch buffer of partial dot products.

dx = y * (g - sum(y*g, dim=-1, keepdim=True)) for 2-D y, g (M, N), float32/float16/bfloat16,
any strides. The grid is (rows, segments of SEGMENT columns). Kernel 1: each program writes
the fp32 sum of y*g over its segment into partial[row, segment]. Kernel 2: each program sums
its row's partials (in segment order, so every program of a row gets the same dot) and writes
dx for its segment. Long rows are spread over many programs; no program waits for another.
"""
import torch
import triton
import triton.language as tl

SEGMENT = 2048


@triton.jit
def _partial_dot(y_ptr, g_ptr, partial_ptr, N, n_segments, sym, syn, sgm, sgn, SEGMENT: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    segment = tl.program_id(1)
    cols = segment * SEGMENT + tl.arange(0, SEGMENT)
    mask = cols < N
    y = tl.load(y_ptr + row * sym + cols * syn, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + row * sgm + cols * sgn, mask=mask, other=0.0).to(tl.float32)
    tl.store(partial_ptr + row * n_segments + segment, tl.sum(y * g, axis=0))


@triton.jit
def _write_dx(y_ptr, g_ptr, dx_ptr, partial_ptr, N, n_segments, sym, syn, sgm, sgn, sdm,
              SEGMENT: tl.constexpr, SEGMENTS_P2: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    segment = tl.program_id(1)
    parts = tl.arange(0, SEGMENTS_P2)
    dot = tl.sum(tl.load(partial_ptr + row * n_segments + parts, mask=parts < n_segments, other=0.0), axis=0)
    cols = segment * SEGMENT + tl.arange(0, SEGMENT)
    mask = cols < N
    y = tl.load(y_ptr + row * sym + cols * syn, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + row * sgm + cols * sgn, mask=mask, other=0.0).to(tl.float32)
    tl.store(dx_ptr + row * sdm + cols, (y * (g - dot)).to(dx_ptr.dtype.element_ty), mask=mask)


def softmax_backward(y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """dx (M, N), fresh and contiguous, y's dtype. Raises TypeError / ValueError on bad inputs."""
    if not isinstance(y, torch.Tensor) or not isinstance(g, torch.Tensor):
        raise TypeError("y and g must be tensors")
    if y.dim() != 2 or y.shape != g.shape:
        raise ValueError(f"shapes must be equal and 2-D: {tuple(y.shape)} vs {tuple(g.shape)}")
    if y.dtype != g.dtype or y.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"dtypes must match and be floating point: {y.dtype} vs {g.dtype}")
    if y.device != g.device:
        raise ValueError(f"devices differ: {y.device} vs {g.device}")
    if y.requires_grad or g.requires_grad:
        raise ValueError("inputs must not require grad")
    m, n = y.shape
    dx = torch.empty((m, n), dtype=y.dtype, device=y.device)
    if m == 0 or n == 0:
        return dx
    segment = min(SEGMENT, triton.next_power_of_2(n))
    n_segments = triton.cdiv(n, segment)
    partial = torch.empty((m, n_segments), dtype=torch.float32, device=y.device)
    strides = (y.stride(0), y.stride(1), g.stride(0), g.stride(1))
    _partial_dot[(m, n_segments)](y, g, partial, n, n_segments, *strides, SEGMENT=segment, num_warps=8)
    _write_dx[(m, n_segments)](y, g, dx, partial, n, n_segments, *strides, dx.stride(0), SEGMENT=segment,
                               SEGMENTS_P2=triton.next_power_of_2(n_segments), num_warps=8)
    return dx
