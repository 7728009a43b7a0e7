"""softmax_backward with @triton.autotune: the chunk size and warp count are chosen per row length.

dx = y * (g - sum(y*g, dim=-1, keepdim=True)) for 2-D y, g (M, N), float32/float16/bfloat16,
any strides. One program per row, two passes over the row in BLOCK_N chunks (fp32 lanes for
the row sum). The autotuner times three configs the first time it sees a row length (key N;
Triton adds the dtypes to the key) and reuses the fastest. Under the CPU interpreter, which
cannot time kernels, the grader runs the first config and says so in the result.
"""
import torch
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK_N": 1024}, num_warps=4),
        triton.Config({"BLOCK_N": 2048}, num_warps=8),
        triton.Config({"BLOCK_N": 4096}, num_warps=8),
    ],
    key=["N"],
)
@triton.jit
def _vjp_autotuned(y_ptr, g_ptr, dx_ptr, N, sym, syn, sgm, sgn, sdm, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        y = tl.load(y_ptr + row * sym + cols * syn, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * sgm + cols * sgn, mask=mask, other=0.0).to(tl.float32)
        acc += y * g
    dot = tl.sum(acc, axis=0)
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        y = tl.load(y_ptr + row * sym + cols * syn, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * sgm + cols * sgn, mask=mask, other=0.0).to(tl.float32)
        tl.store(dx_ptr + row * sdm + cols, (y * (g - dot)).to(dx_ptr.dtype.element_ty), mask=mask)


def softmax_backward(y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """dx (M, N), fresh and contiguous, y's dtype. Raises TypeError / ValueError on bad inputs."""
    if not isinstance(y, torch.Tensor) or not isinstance(g, torch.Tensor):
        raise TypeError("y and g must be tensors")
    if y.dim() != 2 or y.shape != g.shape:
        raise ValueError(f"y and g must be 2-D with one shape: {tuple(y.shape)} vs {tuple(g.shape)}")
    if y.dtype != g.dtype or y.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"bad dtypes {y.dtype} / {g.dtype}")
    if y.device != g.device:
        raise ValueError("y and g are on different devices")
    if y.requires_grad or g.requires_grad:
        raise ValueError("inputs must not require grad")
    m, n = y.shape
    dx = torch.empty((m, n), dtype=y.dtype, device=y.device)
    if m and n:
        _vjp_autotuned[(m,)](y, g, dx, n, y.stride(0), y.stride(1), g.stride(0), g.stride(1), dx.stride(0))
    return dx
