"""Assignment ``softmax_cross_entropy_backward``: dlogits of the mean softmax cross-entropy,
``dx = (softmax(x) - onehot(t)) * grad / n_valid``, as Triton kernels that read x once per row
and never form the C x C softmax Jacobian (the lesson's p - y). The files of this folder are
described in grader/assignments/protocol.py; ``ASSIGNMENT`` is what the generic grader uses."""

from __future__ import annotations

from pathlib import Path

import torch

from grader.assignments.protocol import BenchmarkSpec, Floor, TensorOutput, TimedSelection
from grader.assignments.softmax_cross_entropy_backward import spec
from grader.assignments.softmax_cross_entropy_backward.checks import build_plan
from grader.assignments.softmax_cross_entropy_backward.oracle import benchmark_oracle
from grader.checks import Tolerance
from grader.manifest import get_manifest

HERE = Path(__file__).resolve().parent
_ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
_TARGET_BYTES = 8  # int64


def floor_bytes(shape: tuple[int, ...], dtype: str) -> dict[str, int]:
    """Bytes through device memory: x read once, dlogits written once, the int64 targets read
    (the 4-byte grad is left out); a kernel that cannot keep a row on chip reads x twice."""
    m, c = shape
    elements = m * c * _ELEMENT_BYTES[dtype]
    targets = m * _TARGET_BYTES
    return {"min": 2 * elements + targets, "two_pass": 3 * elements + targets}


class SoftmaxCrossEntropyBackward:
    """``softmax_cross_entropy_backward(x, t, grad, ignore_index=-100) -> dx``
    (grader.assignments.protocol.Assignment)."""

    manifest = get_manifest("softmax_cross_entropy_backward")
    inputs = spec.INPUTS
    outputs = (TensorOutput("dx", ("M", "C"), {str(dtype).replace("torch.", ""): tol
                                              for dtype, tol in spec.TOLERANCES.items()}),)
    check_names = spec.CHECK_NAMES
    reference_file = HERE / "reference.py"
    template_file = HERE / "template.py"
    crash_hint = spec.CRASH_HINT
    benchmark = BenchmarkSpec(
        shapes=spec.BENCHMARK_SHAPES,
        dtypes=spec.BENCHMARK_DTYPES,
        baseline="torch_fp32_expression",
        peers=("torch_fp32_expression", "aten_cross_entropy_backward", "reference", "torch_compile_fp32_expression"),
        scopes={
            "student": "one call of the submission's softmax_cross_entropy_backward(x, t, grad): its Python wrapper "
                       "(validation, output allocation, any target check) and every kernel it launches",
            "torch_fp32_expression": "the assignment's baseline: softmax(x.float()), a one-hot by scatter, "
                                     "(p - onehot) * where(valid, grad / n_valid, 0), .to(dtype): casts, elementwise "
                                     "kernels and reductions, n_valid as a device tensor, no autograd engine",
            "aten_cross_entropy_backward": "what autograd runs for F.cross_entropy's backward, with the tensors it "
                                           "saves recomputed from x: aten._log_softmax and aten.nll_loss_forward "
                                           "(total_weight), then aten.nll_loss_backward (a dense (M, C) gradient "
                                           "of log p) and aten._log_softmax_backward_data",
            "reference": "the course reference kernels "
                         "(grader/assignments/softmax_cross_entropy_backward/reference.py) with their wrapper",
            "torch_compile_fp32_expression": "torch.compile(baseline, dynamic=False, fullgraph=True), compiled once per "
                                             "shape and dtype before timing; guard checks included in event timing",
        },
        floor=Floor("bandwidth", bytes=floor_bytes),
        # Rows of dx need the same rows of x and t (and n_valid, which benchmark_oracle counts
        # over the whole batch).
        selection=TimedSelection(draws={"M": 2}, outputs={"dx": ("M", None)}, inputs=(("M", None), ("M",), None)),
        oracle=benchmark_oracle,
        bench_file=HERE / "bench.py",
        oracle_file=HERE / "oracle.py",
    )

    def build_plan(self, *, seed: int, device: str):
        return build_plan(seed=seed, device=device)

    def tolerance(self, dtype: torch.dtype, output: str | None = None) -> Tolerance:
        return spec.TOLERANCES[dtype]


ASSIGNMENT = SoftmaxCrossEntropyBackward()
