"""Assignment ``softmax_backward``: the softmax VJP ``dx = y * (g - sum(y*g, dim=-1))`` as a
Triton kernel (workshop I2). The files of this folder are described in
grader/assignments/protocol.py; ``ASSIGNMENT`` is what the generic grader uses."""

from __future__ import annotations

from pathlib import Path

import torch

from grader.assignments.protocol import BenchmarkSpec, Floor, TensorOutput, TimedSelection
from grader.assignments.softmax_backward import spec
from grader.assignments.softmax_backward.checks import build_plan
from grader.assignments.softmax_backward.oracle import benchmark_oracle
from grader.checks.tolerance import Tolerance
from grader.manifest import get_manifest

HERE = Path(__file__).resolve().parent
_ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def floor_bytes(shape: tuple[int, ...], dtype: str) -> dict[str, int]:
    """Bytes through device memory: y read, g read, dx written (3 accesses per element); a
    kernel that cannot keep a row on chip reads y and g twice (5 accesses)."""
    m, n = shape
    elements = m * n * _ELEMENT_BYTES[dtype]
    return {"min": 3 * elements, "two_pass": 5 * elements}


class SoftmaxBackward:
    """``softmax_backward(y, g) -> dx`` (grader.assignments.protocol.Assignment)."""

    manifest = get_manifest("softmax_backward")
    inputs = spec.INPUTS
    outputs = (TensorOutput("dx", ("M", "N"), {str(dtype).replace("torch.", ""): tol
                                              for dtype, tol in spec.TOLERANCES.items()}),)
    check_names = spec.CHECK_NAMES
    gpu_only_checks: tuple[str, ...] = spec.GPU_ONLY_CHECKS
    reference_file = HERE / "reference.py"
    template_file = HERE / "template.py"
    crash_hint = spec.CRASH_HINT
    benchmark = BenchmarkSpec(
        shapes=spec.BENCHMARK_SHAPES,
        dtypes=spec.BENCHMARK_DTYPES,
        baseline="torch_fp32_expression",
        peers=("torch_fp32_expression", "aten_softmax_backward_data", "reference", "torch_compile_fp32_expression"),
        scopes={
            "student": "one call of the submission's softmax_backward(y, g): its Python wrapper (validation, "
                       "output allocation) and every kernel it launches",
            "torch_fp32_expression": "the assignment's baseline: y.float(), g.float(), (y*g).sum(-1, keepdim=True), "
                                     "y*(g-dot), .to(dtype): casts, elementwise kernels and one reduction, no autograd engine",
            "aten_softmax_backward_data": "torch.ops.aten._softmax_backward_data(g, y, -1, dtype): PyTorch's fused "
                                          "softmax-backward kernel, the op softmax's autograd node runs",
            "reference": "the course reference kernel (grader/assignments/softmax_backward/reference.py) with its wrapper",
            "torch_compile_fp32_expression": "torch.compile(baseline, dynamic=False, fullgraph=True), compiled once per "
                                             "shape and dtype before timing; guard checks included in event timing",
        },
        floor=Floor("bandwidth", bytes=floor_bytes),
        # Rows of dx need the same rows of y and g only.
        selection=TimedSelection(draws={"M": 2}, outputs={"dx": ("M", None)}, inputs=(("M", None), ("M", None))),
        oracle=benchmark_oracle,
        bench_file=HERE / "bench.py",
        oracle_file=HERE / "oracle.py",
    )

    def build_plan(self, *, seed: int, device: str):
        return build_plan(seed=seed, device=device)

    def tolerance(self, dtype: torch.dtype, output: str | None = None) -> Tolerance:
        return spec.TOLERANCES[dtype]


ASSIGNMENT = SoftmaxBackward()
