"""Every GPU launch plan of the course reference, run under the Triton CPU interpreter.

On a CPU the reference's `_plan` picks interpreter-sized blocks, so the kernels and block
sizes the GPU uses (the one-pass tile table, the two-pass row kernel with its compile-time row
length, the persistent looped kernel, the split kernel pair) would otherwise only ever run on
the lent GPU. Here each one runs through `_launch` on CPU tensors, contiguous and strided,
in float32, float16 and bfloat16, and its output is compared with the fp64 oracle under the
assignment's tolerances. The interpreter must be switched on before Triton is imported, so
the kernels run in a child Python process (TRITON_INTERPRET=1 is set for that child only).
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
import json, sys
import torch
import grader.assignments.softmax_backward.spec as spec
from grader.assignments.softmax_backward.oracle import vjp_fp64
import grader.assignments.softmax_backward.reference as ref

ref._sm_count = lambda device: 4  # a "GPU" with 4 multiprocessors, for _plan's long-row choices
cuda = torch.device("cuda")


def plans():
    """(label, m, n, plan): every GPU plan kind, plus the tuned tables' own entries."""
    yield "twopass chunks+tail", 6, 300, {"kind": "twopass", "BLOCK_N": 128, "num_warps": 4}
    yield "twopass one chunk", 5, 200, {"kind": "twopass", "BLOCK_N": 256, "num_warps": 4}
    yield "looped evict", 9, 300, {"kind": "looped", "BLOCK_N": 128, "num_warps": 4, "STAGES": 1, "EVICT": True, "grid": 4}
    yield "looped plain", 3, 300, {"kind": "looped", "BLOCK_N": 64, "num_warps": 4, "STAGES": 2, "EVICT": False, "grid": 2}
    yield "split", 3, 700, {"kind": "split", "SEG": 256, "BLOCK_N": 128, "num_warps": 4, "STAGES": 1, "EVICT": True}
    yield "rows tile", 7, 100, {"kind": "rows", "ROWS": 4, "BLOCK_N": 128, "num_warps": 4}
    for elem, m, n in ((4, 6, 20000), (2, 6, 20000), (2, 5, 32768), (4, 5, 40000), (4, 2, 20000), (2, 9, 3000)):
        yield f"_plan({m}, {n}, {elem}B)", m, n, ref._plan(m, n, elem, cuda)


def inputs(m, n, dtype, layout, seed):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(m, n, generator=gen, dtype=torch.float64) * 3
    y = torch.softmax(logits, dim=-1)
    g = torch.randn(m, n, generator=gen, dtype=torch.float64)
    if layout == "strided":  # y: a transposed copy viewed back (column stride m); g: every other column
        y = y.t().contiguous().t()
        g = torch.stack([g, torch.zeros_like(g)], dim=-1).reshape(m, 2 * n)[:, ::2]
    return y.to(dtype), g.to(dtype)


results = []
for label, m, n, plan in plans():
    dtypes = (torch.float32, torch.float16, torch.bfloat16)
    if "B)" in label:  # a tuned entry is for one element size
        dtypes = (torch.float32,) if label.endswith("4B)") else (torch.float16, torch.bfloat16)
    for dtype in dtypes:
        for layout in ("contiguous", "strided"):
            y, g = inputs(m, n, dtype, layout, seed=len(results))
            dx = torch.full((m, n), float("nan"), dtype=dtype)
            ref._launch(y, g, dx, dict(plan))
            expected, scale = vjp_fp64(y, g)
            err = ((dx.double() - expected).abs() / spec.TOLERANCES[dtype].allowed(expected, scale))
            worst = float(torch.nan_to_num(err, nan=float("inf")).max())
            results.append({"label": label, "kind": plan["kind"], "plan": plan, "dtype": str(dtype),
                            "layout": layout, "worst_err_over_tol": worst})
print(json.dumps(results))
'''


@pytest.fixture(scope="module")
def plan_results() -> list[dict]:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_gpu_plan_matches_the_oracle(plan_results):
    bad = [r for r in plan_results if not r["worst_err_over_tol"] <= 1.0]
    assert not bad, json.dumps(bad, indent=1)


def test_every_kernel_kind_and_layout_ran(plan_results):
    ran = {(r["kind"], r["layout"]) for r in plan_results}
    for kind in ("rows", "twopass", "looped", "split"):
        assert {(kind, "contiguous"), (kind, "strided")} <= ran, (kind, sorted(ran))


def test_tuned_tables_choose_the_two_pass_kernel_for_rows_up_to_32768(plan_results):
    tuned = {r["label"]: r["plan"] for r in plan_results if "B)" in r["label"]}
    assert tuned["_plan(6, 20000, 4B)"] == {"kind": "twopass", "BLOCK_N": 32768, "num_warps": 32}
    assert tuned["_plan(6, 20000, 2B)"] == {"kind": "twopass", "BLOCK_N": 16384, "num_warps": 32}
    assert tuned["_plan(5, 40000, 4B)"]["kind"] == "looped"  # longer rows: the persistent kernel
    assert tuned["_plan(2, 20000, 4B)"]["kind"] == "split"  # fewer rows than multiprocessors
    assert tuned["_plan(9, 3000, 2B)"]["kind"] == "rows"
