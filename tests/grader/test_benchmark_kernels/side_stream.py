"""Benchmark cheat: run the kernel on a side stream that the caller's stream never waits for.

Events recorded on the caller's stream then bracket almost nothing, so event timing reports
a tiny time while the work runs elsewhere. The outputs are right once the device is
synchronised. The benchmark's device-synchronised wall-clock cross-check must flag the event
time, and graph capture (which does not capture an unjoined stream) must give no graph score.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def _row_kernel(y_ptr, g_ptr, dx_ptr, N, sym, syn, sgm, sgn, sdm, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, N, BLOCK):
        cols = start + offs
        mask = cols < N
        y = tl.load(y_ptr + row * sym + cols * syn, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * sgm + cols * sgn, mask=mask, other=0.0).to(tl.float32)
        acc += y * g
    dot = tl.sum(acc, axis=0)
    for start in range(0, N, BLOCK):
        cols = start + offs
        mask = cols < N
        y = tl.load(y_ptr + row * sym + cols * syn, mask=mask, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + row * sgm + cols * sgn, mask=mask, other=0.0).to(tl.float32)
        tl.store(dx_ptr + row * sdm + cols, (y * (g - dot)).to(dx_ptr.dtype.element_ty), mask=mask)


def _compute(y, g):
    if y.shape != g.shape or y.dtype != g.dtype or y.dim() != 2:
        raise ValueError("bad inputs")
    if y.requires_grad or g.requires_grad:
        raise ValueError("requires grad")
    m, n = y.shape
    dx = torch.empty((m, n), dtype=y.dtype, device=y.device)
    if m and n:
        _row_kernel[(m,)](y, g, dx, n, y.stride(0), y.stride(1), g.stride(0), g.stride(1), dx.stride(0),
                          BLOCK=min(4096, triton.next_power_of_2(n)), num_warps=8)
    return dx


_SIDE = {}


def softmax_backward(y, g):
    if y.device.type != "cuda":
        return _compute(y, g)
    stream = _SIDE.setdefault(y.device, torch.cuda.Stream(device=y.device))
    with torch.cuda.stream(stream):  # no wait_stream in either direction
        return _compute(y, g)
