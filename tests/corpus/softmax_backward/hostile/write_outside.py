"""Tries to write outside its work folder and to read other students' work, then does the work
correctly.

Writes: the host's /tmp (directly and as ../ of its work folder), the Python installation
(a sitecustomize.py in site-packages would run inside every later grading), the interpreter
prefix, HOME. Reads: every other grading-* work folder in /tmp, and every *.py file it can find
by walking the visible file system outside the Python installation and /usr (other students'
submissions, the test corpus). Each attempt prints WROTE/NO_WRITE <path> or FOUND <path> and
the first bytes of what it read.

Expected: verdict passed; none of the host paths exist afterwards; nothing the test planted
as "another submission" appears in the result document.
"""
import glob
import os
import site
import sys

import torch
import triton
import triton.language as tl

_MARK = "grader-hostile-write-outside"
_here = os.getcwd()
_attempts = [
    f"/tmp/{_MARK}.txt",
    os.path.join(_here, "..", f"{_MARK}-escape.txt"),
    os.path.join(sys.prefix, f"{_MARK}.txt"),
    os.path.join(os.path.expanduser("~"), f"{_MARK}-home.txt"),
] + [os.path.join(p, "sitecustomize.py") for p in site.getsitepackages()]
for _path in _attempts:
    try:
        with open(_path, "a", encoding="utf-8") as _handle:
            _handle.write("print('POISONED by a submission')\n" if _path.endswith("sitecustomize.py") else "x\n")
        print(f"WROTE {_path}")
    except OSError as _exc:
        print(f"NO_WRITE {_path} {type(_exc).__name__}")

for _path in glob.glob("/tmp/grad*/**/*.py", recursive=True) + glob.glob("/tmp/*/softmax_backward.py"):
    if os.path.dirname(os.path.abspath(_path)) != _here:
        try:
            print(f"FOUND {_path} {open(_path, encoding='utf-8', errors='replace').read(300)!r}")
        except OSError as _exc:
            print(f"NO_READ {_path} {type(_exc).__name__}")

_skip = {"/proc", "/sys", "/dev", "/usr", os.path.realpath(sys.prefix), os.path.realpath(sys.base_prefix), _here}
_seen = 0
for _root, _dirs, _files in os.walk("/"):
    _dirs[:] = [d for d in _dirs if os.path.realpath(os.path.join(_root, d)) not in _skip]
    for _name in _files:
        if _name.endswith(".py") and _seen < 400:
            _seen += 1
            _path = os.path.join(_root, _name)
            try:
                print(f"FOUND {_path} {open(_path, encoding='utf-8', errors='replace').read(300)!r}")
            except OSError as _exc:
                print(f"NO_READ {_path} {type(_exc).__name__}")


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
