"""Assignment ``softmax_cross_entropy_backward``: dlogits of the mean softmax cross-entropy,
``dx = (softmax(x) - onehot(t)) * grad / n_valid``, as Triton kernels that read x once per row
and never form the C x C softmax Jacobian (the lesson's p - y). The files of this folder are
described in grader/assignments/protocol.py; ``ASSIGNMENT`` is what the generic grader uses."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import torch

from grader.assignments.protocol import BenchmarkSpec, CorpusMinimums, Declared, Floor, OutputOracle, TimedSelection
from grader.assignments.softmax_cross_entropy_backward import spec
from grader.assignments.softmax_cross_entropy_backward.inputs import make_case, replay_case
from grader.assignments.softmax_cross_entropy_backward.oracle import benchmark_oracle, xent_grad_fp64
from grader.checks.generic import build_plan
from grader.checks.plan import CheckEvidence, PlannedCall
from grader.checks.tolerance import Tolerance, compare
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


def placed_oracle(values: Mapping) -> dict[str, OutputOracle]:
    """{"dx": oracle}: p - y of the inputs as placed (oracle.py), ignore_index the call's."""
    expected, scale = xent_grad_fp64(values["x"], values["t"], values["grad"], int(values["ignore_index"]))
    return {"dx": OutputOracle(expected, scale)}


def diagnose(got: torch.Tensor, call: PlannedCall, evidence: CheckEvidence) -> str:
    """Name the common mistake the output matches, if any (a hint, not a verdict): exp
    overflowing on large logits (NaN or inf only on rows whose logits exp cannot hold), or a
    known wrong formula, each compared within the call's own bound."""
    placed = call.extra.get("placed")
    if not placed:
        return ""
    x64, t = placed["x"].double(), placed["t"]
    grad, ignore_index = float(placed["grad"]), int(placed["ignore_index"])
    m, c = x64.shape
    bad_rows = ~torch.isfinite(got.double()).all(dim=-1) if got.dim() == 2 and got.shape[0] == m else None
    if bad_rows is not None and bool(bad_rows.any()) and bool(torch.isfinite(x64).all()):
        # exp(x) overflows fp32 past log(fp32 max) = 88.72; a max-subtracted exp never does.
        overflow = x64.abs().amax(dim=-1) > math.log(torch.finfo(torch.float32).max)
        if bool(overflow[bad_rows].all()):
            return (f" Your output is NaN or inf on {int(bad_rows.sum())} rows, each with logits beyond +-88.7,"
                    f" where exp(x) overflows fp32 (and exp(-x) underflows to 0): subtract the row max before exp.")
    valid = (t != ignore_index).unsqueeze(1)
    n_valid = int(valid.sum())
    p = torch.softmax(x64, dim=-1)
    y = torch.zeros_like(p)
    in_range = (t >= 0) & (t < c)
    y[in_range, t[in_range]] = 1.0  # the one-hot a kernel that ignores ignore_index would build
    y_valid = y * valid
    per_valid = grad / n_valid if n_valid else 0.0
    _, scale = xent_grad_fp64(x64, t, grad, ignore_index)
    candidates = {
        "(p - y) * grad without the division by n_valid (the mean over valid rows)": (p - y_valid) * valid * grad,
        "(y - p) * grad / n_valid: the sign is flipped": (y_valid - p) * valid * per_valid,
        "a softmax over dim 0 (down each column, across rows) instead of over the classes of each row":
            (torch.softmax(x64, dim=0) - y_valid) * valid * per_valid,
        "(p - y) / n_valid: the upstream gradient grad is missing (taken as 1)":
            (p - y_valid) * valid * (1.0 / n_valid if n_valid else 0.0),
        "ignore_index is not honoured: ignored rows get p * grad / M and every row is counted":
            (p - y) * (grad / m),
        "the mean divides by every row (M) instead of n_valid, the rows whose target is not ignore_index":
            (p - y_valid) * valid * (grad / m),
        "ignored rows are not zeroed (they get p * grad / n_valid)": (p - y) * per_valid,
        "all zeros": torch.zeros_like(p),
    }
    expected = call.expected[0]
    for description, candidate in candidates.items():
        if got.shape != candidate.shape or compare(candidate, expected, scale, call.tolerance).passed:
            continue  # on these inputs the mistake gives the right answer: it cannot be told apart
        # The candidate's own magnitude joins the scale: the oracle's scale is 0 on ignored rows
        # and tiny where the right p is tiny, but the mistaken formula has its own fp32 roundings.
        if compare(got, candidate, scale + candidate.abs(), call.tolerance).passed:
            return f" Your output matches {description}."
    return ""


DECLARED = Declared(inputs=spec.INPUTS, outputs=spec.OUTPUTS, make_case=make_case, oracle=placed_oracle,
                    checks=spec.checks, hints=spec.HINTS, diagnose=diagnose, replay_case=replay_case,
                    hint_requires={"training_step": ("autograd_fp32",)})


class SoftmaxCrossEntropyBackward:
    """``softmax_cross_entropy_backward(x, t, grad, ignore_index=-100) -> dx``
    (grader.assignments.protocol.Assignment)."""

    manifest = get_manifest("softmax_cross_entropy_backward")
    inputs = spec.INPUTS
    outputs = spec.OUTPUTS
    declared = DECLARED
    check_names = spec.CHECK_NAMES
    gpu_only_checks: tuple[str, ...] = ()
    reference_file = HERE / "reference.py"
    template_file = HERE / "template.py"
    crash_hint = spec.CRASH_HINT
    corpus = CorpusMinimums(correct=2)  # its issue asked for two correct styles
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
        return build_plan(DECLARED, seed=seed, device=device, check_names=self.check_names,
                          assignment=self.manifest.name)

    def tolerance(self, dtype: torch.dtype, output: str | None = None) -> Tolerance:
        return spec.TOLERANCES[str(dtype).replace("torch.", "")]


ASSIGNMENT = SoftmaxCrossEntropyBackward()
