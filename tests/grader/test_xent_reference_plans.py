"""Every GPU launch plan of the ``softmax_cross_entropy_backward`` reference, run under the
Triton CPU interpreter.

On a CPU the reference's `_plan` picks interpreter-sized blocks (whole rows, large tiles), so
the looped two-pass kernel, the GPU tile table's entries and the int64 addressing would
otherwise only ever run on the lent GPU. Here each runs through `_launch` on CPU tensors,
contiguous and strided, in float32, float16 and bfloat16, with ignored rows, and its output is
compared with the fp64 oracle under the assignment's tolerances. The interpreter must be
switched on before Triton is imported, so the kernels run in a child Python process
(TRITON_INTERPRET=1 is set for that child only).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CHILD = r'''
import json
import torch
import grader.assignments.softmax_cross_entropy_backward.reference as ref
from grader.assignments.softmax_cross_entropy_backward.inputs import large_logits, random_case
from grader.assignments.softmax_cross_entropy_backward.oracle import xent_grad_fp64
from grader.assignments.softmax_cross_entropy_backward.spec import TOLERANCES

cuda = torch.device("cuda")


def plans():
    """(label, m, c, plan, int64): every GPU plan kind, the tile table's entries, int64 offsets."""
    yield "looped chunks+tail evict", 5, 300, {"kind": "looped", "BLOCK_C": 64, "num_warps": 4, "EVICT": True}, False
    yield "looped one chunk", 3, 200, {"kind": "looped", "BLOCK_C": 256, "num_warps": 4, "EVICT": False}, False
    yield "looped int64", 3, 300, {"kind": "looped", "BLOCK_C": 128, "num_warps": 4, "EVICT": False}, True
    yield "rows tile", 7, 100, {"kind": "rows", "ROWS": 4, "BLOCK_C": 128, "num_warps": 4}, False
    yield "rows int64", 7, 100, {"kind": "rows", "ROWS": 2, "BLOCK_C": 128, "num_warps": 4}, True
    for m, c in ((37, 128), (9, 1000), (5, 3000), (3, 8193), (2, 20000), (2, 40000)):
        yield f"_plan({m}, {c})", m, c, ref._plan(m, c, 4, cuda), False


def inputs(m, c, dtype, layout, seed, large=False):
    gen = torch.Generator().manual_seed(seed)
    x, t = random_case(gen, m, c, ignored=range(1, m, 3))
    if large:
        x, _ = large_logits(gen, m, c)
    if layout == "strided":  # x: a transposed copy viewed back; t: every other element
        x = x.t().contiguous().t()
        t = torch.stack([t, torch.zeros_like(t)], dim=-1).reshape(2 * m)[::2]
    return x.to(dtype), t, torch.tensor(0.75)


results = []
original_needs_int64 = ref._needs_int64
for label, m, c, plan, int64 in plans():
    ref._needs_int64 = (lambda x, t: True) if int64 else original_needs_int64
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        for layout in ("contiguous", "strided"):
            for large in ((False, True) if c <= 1000 else (False,)):
                x, t, grad = inputs(m, c, dtype, layout, seed=len(results), large=large)
                dx = torch.full((m, c), float("nan"), dtype=dtype)
                ref._launch(x, t, grad, dx, -100, dict(plan))
                expected, scale = xent_grad_fp64(x, t, grad)
                err = (dx.double() - expected).abs() / TOLERANCES[str(dtype).removeprefix("torch.")].allowed(expected, scale)
                worst = float(torch.nan_to_num(err, nan=float("inf")).max())
                results.append({"label": label, "kind": plan["kind"], "plan": plan, "dtype": str(dtype),
                                "layout": layout, "large": large, "int64": int64, "worst_err_over_tol": worst})
print(json.dumps(results))
'''


@pytest.fixture(scope="module")
def plan_results() -> list[dict]:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_gpu_plan_matches_the_oracle(plan_results):
    bad = [r for r in plan_results if not r["worst_err_over_tol"] <= 1.0]
    assert not bad, json.dumps(bad, indent=1)


def test_every_kernel_kind_layout_and_addressing_ran(plan_results):
    ran = {(r["kind"], r["layout"], r["int64"]) for r in plan_results}
    for kind in ("rows", "looped"):
        for int64 in (False, True):
            assert {(kind, "contiguous", int64), (kind, "strided", int64)} <= ran, (kind, sorted(ran))
    assert any(r["large"] and r["kind"] == "looped" for r in plan_results)


def test_gpu_plan_keeps_rows_up_to_32768_on_chip_and_loops_longer_ones(plan_results):
    chosen = {r["label"]: r["plan"] for r in plan_results if r["label"].startswith("_plan")}
    assert chosen["_plan(37, 128)"] == {"kind": "rows", "ROWS": 32, "BLOCK_C": 128, "num_warps": 4}
    assert chosen["_plan(9, 1000)"] == {"kind": "rows", "ROWS": 4, "BLOCK_C": 1024, "num_warps": 4}
    assert chosen["_plan(2, 20000)"] == {"kind": "rows", "ROWS": 1, "BLOCK_C": 32768, "num_warps": 32}
    assert chosen["_plan(2, 40000)"]["kind"] == "looped" and chosen["_plan(2, 40000)"]["EVICT"]
