"""bf16 arithmetic under the CPU interpreter (grader/harness/interpreter_bf16.py).

Triton 3.6's interpreter multiplies bf16 bit patterns as integers (the probe below: 0.75 x -1
gives 3.7e19); with ``install()`` every bf16 operation goes through fp32 and rounds to nearest
even, giving PyTorch's bf16 results bit for bit. The kernels run in a child Python under
TRITON_INTERPRET=1 (the patch is process-wide).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from grader.harness.interpreter_bf16 import bf16_bits_to_fp32, fp32_to_bf16_bits

HARNESS = Path(__file__).resolve().parents[3] / "grader" / "harness"

SCRIPT = textwrap.dedent('''
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import torch, triton, triton.language as tl
    import interpreter_bf16

    @triton.jit
    def ops(a_ptr, b_ptr, prod_ptr, diff_ptr, max_ptr, cast_ptr, sum_ptr, dot_ptr, N: tl.constexpr):
        i = tl.arange(0, N)
        a = tl.load(a_ptr + i)
        b = tl.load(b_ptr + i)
        tl.store(prod_ptr + i, a * b)
        tl.store(diff_ptr + i, a * b - a * 0.5)  # 0.5: a bf16 constant
        tl.store(max_ptr + i, tl.maximum(a, b))
        tl.store(cast_ptr + i, (a.to(tl.float32) * 1.0001).to(cast_ptr.dtype.element_ty))
        tl.store(sum_ptr, tl.sum(a * b, axis=0))
        m = tl.reshape(a, (16, 16))
        tl.store(dot_ptr + tl.arange(0, 16)[:, None] * 16 + tl.arange(0, 16)[None, :], tl.dot(m, m))

    @triton.jit
    def product(a_ptr, b_ptr, prod_ptr, N: tl.constexpr):
        i = tl.arange(0, N)
        tl.store(prod_ptr + i, tl.load(a_ptr + i) * tl.load(b_ptr + i))

    @triton.jit
    def column_sums(x_ptr, sums_ptr, n_cols, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols)
        tl.atomic_add(sums_ptr + cols % 4, x, mask=cols < n_cols)  # 4 addresses, each hit n/4 times

    def atomics(dtype):
        torch.manual_seed(1)
        x = torch.randn(6, 10).to(dtype)
        sums = torch.zeros(5, dtype=dtype)  # sums[4] is never addressed
        try:
            column_sums[(6,)](x, sums, 10, BLOCK=16)
        except Exception as exc:
            return {"error": str(exc)[:300]}
        expected = torch.zeros(5, dtype=dtype)
        for row in range(6):  # one add at a time, each rounded, in program and element order
            for col in range(10):
                expected[col % 4] = (expected[col % 4].float() + x[row, col].float()).to(dtype)
        return {"equal": torch.equal(sums, expected), "got": sums.tolist(), "expected": expected.tolist()}

    def probe():
        a, b = torch.tensor([0.75, 2.0], dtype=torch.bfloat16), torch.tensor([-1.0, 0.5], dtype=torch.bfloat16)
        out = torch.empty_like(a)
        product[(1,)](a, b, out, N=2)
        return {"probe": out[0].item(), "prod": torch.equal(out, a * b)}

    def run(dtype):
        torch.manual_seed(0)
        a, b = torch.randn(256).to(dtype), torch.randn(256).to(dtype)
        a[0], b[0] = 0.75, -1.0
        outs = [torch.empty_like(a) for _ in range(4)] + [torch.empty(1, dtype=dtype),
                                                          torch.empty(16, 16, dtype=torch.float32)]
        ops[(1,)](a, b, *outs, N=256)
        prod, diff, top, cast, total, dot = outs
        m = a.float().view(16, 16)
        return {"probe": prod[0].item(), "prod": torch.equal(prod, a * b), "diff": torch.equal(diff, a * b - a * 0.5),
                "max": torch.equal(top, torch.maximum(a, b)),
                "cast": torch.equal(cast, (a.float() * 1.0001).to(dtype)),
                "sum_error": abs(total.item() - (a * b).double().sum().item()),
                "dot_error": (dot.double() - (m @ m).double()).abs().max().item()}

    results = {"before": probe(), "atomics_before": atomics(torch.bfloat16)}
    interpreter_bf16.install()
    results["atomics_bf16"] = atomics(torch.bfloat16)
    results["atomics_fp16"] = atomics(torch.float16)
    results["bf16"] = run(torch.bfloat16)
    results["fp16"] = run(torch.float16)
    print(json.dumps(results))
''')


@pytest.fixture(scope="module")
def results() -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(HARNESS)], capture_output=True, text=True, env=env,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_interpreter_alone_gets_bf16_products_wrong(results):
    """The probe of issue 22, reproduced: without the patch, 0.75 x -1 in bf16 is not -0.75."""
    assert results["before"]["probe"] != -0.75 and not results["before"]["prod"], results["before"]


def test_bf16_arithmetic_through_fp32_matches_pytorch_bit_for_bit(results):
    bf16 = results["bf16"]
    assert bf16["probe"] == -0.75, bf16
    assert bf16["prod"] and bf16["diff"] and bf16["max"] and bf16["cast"], bf16
    assert bf16["dot_error"] < 1e-4, bf16  # bf16 inputs, fp32 accumulator: exact products
    # A bf16 sum rounds after every add (as a GPU's bf16 reduction does): a few bf16 ulps of
    # the partial sums (|sum| < 64: ulp <= 0.25) off the exact total, not garbage.
    assert bf16["sum_error"] < 1.0, bf16


def test_bf16_atomic_add_is_refused_by_the_interpreter_alone(results):
    """Without the patch the interpreter cannot run a bf16 ``tl.atomic_add`` at all."""
    assert "Unsupported data type" in results["atomics_before"].get("error", ""), results["atomics_before"]


def test_bf16_atomic_add_rounds_each_add_as_the_gpu_does(results):
    """Many programs and repeated addresses inside one block (``cols % 4``), masked lanes: the
    sums equal one add at a time rounded to bf16, and an address no lane names is untouched."""
    assert results["atomics_bf16"].get("equal"), results["atomics_bf16"]
    assert results["atomics_fp16"].get("equal"), results["atomics_fp16"]  # fp16: the interpreter's own


def test_fp16_is_left_as_the_interpreter_computes_it(results):
    fp16 = results["fp16"]
    assert fp16["prod"] and fp16["diff"] and fp16["max"] and fp16["cast"], fp16


def test_rounding_to_bf16_matches_pytorch():
    values = torch.cat([torch.randn(100_000) * 10.0 ** torch.randint(-30, 30, (100_000,)),
                        torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 3.3895314e38, 1e-40, -1e-42]),
                        # ties: exactly half-way between two bf16 values, both parities
                        bf16_tensor_ties()])
    expected = values.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    assert np.array_equal(fp32_to_bf16_bits(values.numpy()), expected)
    nan = fp32_to_bf16_bits(np.array([np.nan, -np.nan], dtype=np.float32))
    assert np.isnan(bf16_bits_to_fp32(nan)).all()


def bf16_tensor_ties() -> torch.Tensor:
    base = torch.arange(0x3F80, 0x3F90, dtype=torch.int32) << 16
    return (base | 0x8000).view(torch.float32)
