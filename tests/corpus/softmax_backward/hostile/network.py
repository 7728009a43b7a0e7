"""Tries the network while being imported: the PostgreSQL port on 127.0.0.1, a range of local
ports where the test runs a TCP server, the usual web/API ports, public DNS servers and name
resolution. Every success prints CONNECTED <where> and makes the import fail.

Expected: no connection anywhere; verdict passed (the kernel is right).
"""
import socket

import torch
import triton
import triton.language as tl

_reached = []
_targets = [("127.0.0.1", port) for port in [5432, 8000, 8765, 80, 443, *range(47300, 47400)]]
_targets += [("1.1.1.1", 53), ("8.8.8.8", 53), ("10.0.0.1", 5432), ("172.17.0.1", 5432)]
for _host, _port in _targets:
    try:
        with socket.create_connection((_host, _port), timeout=0.5) as _sock:
            _sock.settimeout(0.5)
            try:
                _banner = _sock.recv(200)
            except OSError:
                _banner = b""
        print(f"CONNECTED {_host}:{_port} {_banner!r}")
        _reached.append(f"{_host}:{_port} {_banner!r}")
    except OSError as _exc:
        print(f"NO_ROUTE {_host}:{_port} {type(_exc).__name__}")
try:
    print("RESOLVED", socket.gethostbyname("example.com"))
    _reached.append("dns")
except OSError as _exc:
    print("NO_DNS", type(_exc).__name__)
if _reached:
    raise ImportError(f"reached the network: {_reached}")


@triton.jit
def _vjp_rows(y_ptr, g_ptr, dx_ptr, N, sym, syn, sgm, sgn, sdm, BLOCK: tl.constexpr):
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


def _checked_vjp(y, g):
    if not isinstance(y, torch.Tensor) or not isinstance(g, torch.Tensor):
        raise TypeError("y and g must be tensors")
    if y.dim() != 2 or y.shape != g.shape:
        raise ValueError("y and g must be 2-D of the same shape")
    if y.dtype != g.dtype:
        raise TypeError("dtype mismatch")
    if y.device != g.device:
        raise ValueError("device mismatch")
    if y.requires_grad or g.requires_grad:
        raise ValueError("inputs must not require grad")
    m, n = y.shape
    dx = torch.empty((m, n), dtype=y.dtype, device=y.device)
    _vjp_rows[(m,)](y, g, dx, n, y.stride(0), y.stride(1), g.stride(0), g.stride(1), dx.stride(0), BLOCK=4096)
    return dx


def softmax_backward(y, g):
    return _checked_vjp(y, g)
