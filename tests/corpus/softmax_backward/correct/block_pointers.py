"""softmax_backward with block pointers (tl.make_block_ptr / tl.advance), one program per row.

dx = y * (g - sum(y*g, dim=-1, keepdim=True)) for 2-D y, g (M, N), float32/float16/bfloat16,
any strides. Each program builds 1-D block pointers over its row of y, g and dx (the row's
start is computed in int64, so rows past 2^31 elements are addressed correctly), loads BLOCK
elements at a time with boundary_check and zero padding, and advances them along the row:
once to reduce y*g in fp32, once more to write dx. Needs Triton <= 3.8 (3.9 removed
tl.make_block_ptr).
"""
import torch
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _vjp_block_ptr(y_ptr, g_ptr, dx_ptr, N, sym, syn, sgm, sgn, sdm, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    y_blocks = tl.make_block_ptr(y_ptr + row * sym, shape=(N,), strides=(syn,), offsets=(0,),
                                 block_shape=(BLOCK,), order=(0,))
    g_blocks = tl.make_block_ptr(g_ptr + row * sgm, shape=(N,), strides=(sgn,), offsets=(0,),
                                 block_shape=(BLOCK,), order=(0,))
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for _ in range(0, tl.cdiv(N, BLOCK)):
        y = tl.load(y_blocks, boundary_check=(0,), padding_option="zero").to(tl.float32)
        g = tl.load(g_blocks, boundary_check=(0,), padding_option="zero").to(tl.float32)
        acc += y * g
        y_blocks = tl.advance(y_blocks, (BLOCK,))
        g_blocks = tl.advance(g_blocks, (BLOCK,))
    dot = tl.sum(acc, axis=0)
    y_blocks = tl.make_block_ptr(y_ptr + row * sym, shape=(N,), strides=(syn,), offsets=(0,),
                                 block_shape=(BLOCK,), order=(0,))
    g_blocks = tl.make_block_ptr(g_ptr + row * sgm, shape=(N,), strides=(sgn,), offsets=(0,),
                                 block_shape=(BLOCK,), order=(0,))
    dx_blocks = tl.make_block_ptr(dx_ptr + row * sdm, shape=(N,), strides=(1,), offsets=(0,),
                                  block_shape=(BLOCK,), order=(0,))
    for _ in range(0, tl.cdiv(N, BLOCK)):
        y = tl.load(y_blocks, boundary_check=(0,), padding_option="zero").to(tl.float32)
        g = tl.load(g_blocks, boundary_check=(0,), padding_option="zero").to(tl.float32)
        tl.store(dx_blocks, (y * (g - dot)).to(dx_ptr.dtype.element_ty), boundary_check=(0,))
        y_blocks = tl.advance(y_blocks, (BLOCK,))
        g_blocks = tl.advance(g_blocks, (BLOCK,))
        dx_blocks = tl.advance(dx_blocks, (BLOCK,))


def softmax_backward(y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """dx (M, N), fresh and contiguous, y's dtype. Raises TypeError / ValueError on bad inputs."""
    if not (isinstance(y, torch.Tensor) and isinstance(g, torch.Tensor)):
        raise TypeError("y and g must be torch tensors")
    if y.requires_grad or g.requires_grad:
        raise ValueError("y and g must not require grad")
    if y.dim() != 2 or g.dim() != 2 or y.shape != g.shape:
        raise ValueError(f"need two 2-D tensors of the same shape, got {tuple(y.shape)} and {tuple(g.shape)}")
    if y.dtype not in (torch.float32, torch.float16, torch.bfloat16) or g.dtype != y.dtype:
        raise TypeError(f"dtype must be float32, float16 or bfloat16 and the same for both: {y.dtype}, {g.dtype}")
    if y.device != g.device:
        raise ValueError(f"y ({y.device}) and g ({g.device}) must be on one device")
    m, n = y.shape
    dx = torch.empty((m, n), dtype=y.dtype, device=y.device)
    if m > 0 and n > 0:
        _vjp_block_ptr[(m,)](y, g, dx, n, y.stride(0), y.stride(1), g.stride(0), g.stride(1), dx.stride(0),
                             BLOCK=BLOCK, num_warps=4)
    return dx
