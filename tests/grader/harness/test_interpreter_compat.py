"""The CPU interpreter as the GPU compiler for what public kernels use
(grader/harness/interpreter_compat.py), and the poison in memory a submission never writes
(grader/harness/poison.py, grader/checks/poison.py).

The kernels run in a child Python under TRITON_INTERPRET=1 (the patches are process-wide), with
the harness folder on its path as the check child has it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from grader.checks.poison import diagnose_unwritten, poisoned
from grader.harness.interpreter_compat import UNAVAILABLE_MARK
from grader.harness.poison import POISON_BYTE

HARNESS = Path(__file__).resolve().parents[3] / "grader" / "harness"

SCRIPT = textwrap.dedent('''
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import interpreter_bf16, interpreter_compat, poison
    interpreter_bf16.install(); interpreter_compat.install(); poison.install()
    import torch, triton, triton.language as tl
    from triton.language.extra import libdevice
    from triton.language.extra.cuda import libdevice as cuda_libdevice
    from triton.language.extra.libdevice import erf

    @triton.jit
    def math(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + i, mask=i < n, other=1.0)
        tl.store(out_ptr + 0 * n + i, libdevice.tanh(x), mask=i < n)
        tl.store(out_ptr + 1 * n + i, cuda_libdevice.exp(x), mask=i < n)
        tl.store(out_ptr + 2 * n + i, erf(x), mask=i < n)
        tl.store(out_ptr + 3 * n + i, libdevice.rsqrt(x * x + 1.0), mask=i < n)
        tl.store(out_ptr + 4 * n + i, libdevice.pow(tl.abs(x), 1.5), mask=i < n)
        tl.store(out_ptr + 5 * n + i, tl.extra.cuda.libdevice.erfinv(x * 0.25), mask=i < n)

    @triton.jit
    def masks(out_ptr, rows, BLOCK: tl.constexpr):
        r = tl.arange(0, BLOCK)[:, None]
        c = tl.arange(0, BLOCK)[None, :]
        tl.store(out_ptr + r * BLOCK + c, 1.0, mask=(r < rows) and (c < BLOCK))
        tl.store(out_ptr + BLOCK * BLOCK + r * BLOCK + c, 1.0, mask=(r < rows) or (c < 1))
        tl.store(out_ptr + 2 * BLOCK * BLOCK + r * BLOCK + c, 1.0, mask=not (r < rows))
        if rows > 2 and not (rows > 100):  # scalars stay Python's and/not
            tl.store(out_ptr + 3 * BLOCK * BLOCK, 7.0)

    @triton.jit
    def unavailable(x_ptr, out_ptr):
        tl.store(out_ptr, libdevice.jn(1, tl.load(x_ptr)))

    @triton.jit
    def accumulate(x_ptr, acc_ptr, n, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        tl.store(acc_ptr + i, tl.load(acc_ptr + i, mask=i < n) + tl.load(x_ptr + i, mask=i < n), mask=i < n)

    result = {}
    x = torch.linspace(-3, 3, 37)
    out = torch.zeros(6, 37)
    math[(1,)](x, out, 37, BLOCK=64)
    want = [torch.tanh(x), torch.exp(x), torch.erf(x), torch.rsqrt(x * x + 1), x.abs() ** 1.5, torch.erfinv(x * 0.25)]
    result["math_err"] = [float(((o - w).abs() / w.abs().clamp_min(1e-6)).max()) for o, w in zip(out, want)]
    out = torch.zeros(3 * 64 + 1)
    masks[(1,)](out, 3, BLOCK=8)
    result["and_rows"] = out[:64].view(8, 8).sum(dim=1).tolist()
    result["or_rows"] = out[64:128].view(8, 8).sum(dim=1).tolist()
    result["not_rows"] = out[128:192].view(8, 8).sum(dim=1).tolist()
    result["scalar"] = float(out[192])
    result["notes"] = interpreter_compat.notes()
    try:
        unavailable[(1,)](torch.ones(1), torch.zeros(1))
        result["unavailable"] = None
    except Exception as exc:
        result["unavailable"] = repr(exc)
    acc = torch.empty(10)
    accumulate[(1,)](torch.ones(10), acc, 10, BLOCK=16)
    result["accumulated_bits"] = acc.view(torch.int32).tolist()
    result["fresh"] = {str(dtype): torch.empty(3, dtype=dtype).view(torch.uint8).tolist()
                       for dtype in (torch.float32, torch.bfloat16, torch.int64)}
    kept = torch.full((4,), 2.0)
    torch.empty(4, out=kept)
    result["out_kept"] = kept.view(torch.int32).tolist()
    print(json.dumps(result))
''')


@pytest.fixture(scope="module")
def probe(tmp_path_factory) -> dict:
    # A file, not ``python -c``: the interpreter rewrites a kernel from its source file, as it
    # does a submission's.
    script = tmp_path_factory.mktemp("interpreter-compat") / "probe.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, str(script), str(HARNESS)], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_libdevice_math_runs_on_the_interpreter_within_a_few_ulp(probe):
    # tanh, exp, erf, rsqrt, pow, erfinv from both libdevice modules: fp32, the precision class
    # of libdevice's fp32 functions (a few ulp = a few 1e-7 relative).
    assert all(err < 2e-6 for err in probe["math_err"]), probe["math_err"]


def test_and_or_not_between_tensors_are_element_wise_as_compiled(probe):
    assert probe["and_rows"] == [8, 8, 8, 0, 0, 0, 0, 0]  # Python's `and` wrote all 8 rows
    assert probe["or_rows"] == [8, 8, 8, 1, 1, 1, 1, 1]
    assert probe["not_rows"] == [0, 0, 0, 8, 8, 8, 8, 8]
    assert probe["scalar"] == 7.0
    assert probe["notes"] and all("deprecated for non-scalar tensors" in note for note in probe["notes"])


def test_a_libdevice_function_not_evaluated_is_named(probe):
    assert f"libdevice.jn {UNAVAILABLE_MARK}" in probe["unavailable"]


def test_fresh_memory_holds_the_poison_and_keeps_it_through_arithmetic(probe):
    assert probe["accumulated_bits"] == [-1] * 10  # NaN + 1 keeps the poison's bits on a CPU
    assert all(set(b) == {POISON_BYTE} for b in probe["fresh"].values()), probe["fresh"]
    # empty(out=) of an existing tensor: torch's own deterministic fill (a quiet NaN), not the poison
    assert probe["out_kept"] == [0x7FC00000] * 4


def test_the_parent_names_poisoned_outputs_and_nothing_else():
    out = torch.tensor([1.0, float("nan"), 0.0, 0.0])
    out.view(torch.int32)[2:] = -1  # the poison: every bit set
    assert poisoned(out).tolist() == [False, False, True, True]  # the guard NaN (0x7FC00000) is not it
    assert "memory that was never written" in diagnose_unwritten(out)
    assert diagnose_unwritten(torch.tensor([float("nan"), 1.0])) == ""
    half = torch.zeros(3, dtype=torch.bfloat16)
    half.view(torch.int16)[0] = -1
    assert poisoned(half).tolist() == [True, False, False]


def test_a_poisoned_tail_block_is_named_as_left_unwritten():
    out = torch.ones(4, 8)
    out[:, 5:].view(torch.int32).fill_(-1)  # every column from 5 on: a loop that stops short
    finding = diagnose_unwritten(out)
    assert "left those outputs unwritten" in finding and "every column from column 5 on" in finding, finding
    assert "never written" not in finding  # the scratch buffer's words are for memory accumulated into
