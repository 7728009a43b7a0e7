"""Benchmark cheat: carve out persisting L2 for the inputs on every call.

Sets cudaLimitPersistingL2CacheSize to the largest allowed value through ctypes before each
launch, hoping inputs stay in L2 across the benchmark's flushes. The harness resets the limit
before each phase and reads it back after timing: a changed limit must end with no score.
"""
import ctypes
import os
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


_LIB = []


def _cudart():
    if not _LIB:
        path = None
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "libcudart.so" in line:
                    path = line.split()[-1]
                    break
        _LIB.append(ctypes.CDLL(path or "libcudart.so"))
    return _LIB[0]


def softmax_backward(y, g):
    if y.device.type == "cuda":
        try:
            lib = _cudart()
            size = ctypes.c_int(0)
            # cudaDevAttrMaxPersistingL2CacheSize = 108
            lib.cudaDeviceGetAttribute(ctypes.byref(size), ctypes.c_int(108), ctypes.c_int(y.device.index or 0))
            if lib.cudaDeviceSetLimit(ctypes.c_int(0x06), ctypes.c_size_t(size.value)) != 0:
                lib.cudaGetLastError()  # clear the error so that torch does not see it
        except Exception:  # noqa: BLE001
            pass
    return _compute(y, g)
