"""softmax_backward over 2-D tiles: several rows per program, [ROWS, BLOCK_N] tiles.

dx = y * (g - sum(y*g, dim=-1, keepdim=True)) for 2-D y, g (M, N), float32/float16/bfloat16,
any strides. A program owns ROWS rows and walks their columns in BLOCK_N-wide tiles, twice:
first to reduce each row's y*g (fp32, one value per row), then to write dx. Short rows fit in
one tile, so many rows share a program; ROWS and BLOCK_N come from @triton.heuristics (at most
4096 elements per tile).
"""
import torch
import triton
import triton.language as tl

TILE_ELEMENTS = 4096


def _block_n(args) -> int:
    return min(triton.next_power_of_2(args["N"]), TILE_ELEMENTS)


def _rows(args) -> int:
    return max(1, min(TILE_ELEMENTS // _block_n(args), triton.next_power_of_2(args["M"]), 64))


@triton.heuristics({"BLOCK_N": _block_n, "ROWS": _rows})
@triton.jit
def _vjp_tiles(y_ptr, g_ptr, dx_ptr, M, N, sym, syn, sgm, sgn, sdm, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)
    row_ok = rows < M
    cols = tl.arange(0, BLOCK_N).to(tl.int64)
    dot = tl.zeros([ROWS], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        c = start + cols
        mask = row_ok[:, None] & (c < N)[None, :]
        y = tl.load(y_ptr + rows[:, None] * sym + c[None, :] * syn, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + rows[:, None] * sgm + c[None, :] * sgn, mask=mask, other=0.0).to(tl.float32)
        dot += tl.sum(y * g, axis=1)
    for start in range(0, N, BLOCK_N):
        c = start + cols
        mask = row_ok[:, None] & (c < N)[None, :]
        y = tl.load(y_ptr + rows[:, None] * sym + c[None, :] * syn, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + rows[:, None] * sgm + c[None, :] * sgn, mask=mask, other=0.0).to(tl.float32)
        dx = y * (g - dot[:, None])
        tl.store(dx_ptr + rows[:, None] * sdm + c[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)


def softmax_backward(y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """dx (M, N), fresh and contiguous, y's dtype. Raises TypeError / ValueError on bad inputs."""
    for name, t in (("y", y), ("g", g)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.requires_grad:
            raise ValueError(f"{name} requires grad; pass a detached tensor")
    if y.dim() != 2 or y.shape != g.shape:
        raise ValueError(f"expected two 2-D tensors of one shape, got {tuple(y.shape)} and {tuple(g.shape)}")
    if y.dtype != g.dtype or y.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"unsupported or mismatched dtypes {y.dtype}, {g.dtype}")
    if y.device != g.device:
        raise ValueError(f"y on {y.device}, g on {g.device}")
    m, n = y.shape
    dx = torch.empty((m, n), dtype=y.dtype, device=y.device)
    if m == 0 or n == 0:
        return dx

    def grid(meta):
        return (triton.cdiv(m, meta["ROWS"]),)

    _vjp_tiles[grid](y, g, dx, m, n, y.stride(0), y.stride(1), g.stride(0), g.stride(1), dx.stride(0), num_warps=8)
    return dx
