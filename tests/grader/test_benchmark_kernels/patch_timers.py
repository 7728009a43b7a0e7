"""Benchmark cheat: a correct kernel whose module replaces the timing functions at import.

torch.cuda.Event.elapsed_time returns a tenth of the truth, time.perf_counter runs slow, and
triton.testing.do_bench / torch.cuda.synchronize are replaced. The harness took its own
references before importing this module, so its numbers are unaffected; it must also report
the replacement, and the run must end with no score.
"""
import time as _time
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


_real_elapsed = torch.cuda.Event.elapsed_time
_real_perf = _time.perf_counter


def _fast_elapsed(self, end_event):
    return 0.1 * _real_elapsed(self, end_event)


torch.cuda.Event.elapsed_time = _fast_elapsed
_time.perf_counter = lambda: 0.1 * _real_perf()
torch.cuda.synchronize = lambda *args, **kwargs: None
try:
    import triton.testing as _tt

    _tt.do_bench = lambda *args, **kwargs: 1e-6
    _tt.do_bench_cudagraph = lambda *args, **kwargs: 1e-6
except Exception:  # noqa: BLE001
    pass


def softmax_backward(y, g):
    return _compute(y, g)
