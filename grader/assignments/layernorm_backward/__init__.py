"""Assignment ``layernorm_backward``: dx, dw and db of layer norm from the saved mean and rstd, as
Triton kernels, dw and db reduced across rows (locks and partial buffers, atomics, or a second
pass). The folder's files are described in grader/assignments/protocol.py; ``ASSIGNMENT`` is
what the generic grader uses."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from grader.assignments.layernorm_backward import spec
from grader.assignments.layernorm_backward.inputs import make_case
from grader.assignments.layernorm_backward.oracle import benchmark_oracle, layernorm_backward_fp64
from grader.assignments.protocol import BenchmarkSpec, Declared, Floor, OutputOracle, TimedSelection
from grader.checks.generic import build_plan
from grader.checks.tolerance import Tolerance, compare
from grader.manifest import get_manifest

HERE = Path(__file__).resolve().parent
_ELEMENT_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


def placed_oracle(values: Mapping) -> dict[str, OutputOracle]:
    """{"dx", "dw", "db": oracle}: the closed form on the inputs as placed (oracle.py)."""
    result = layernorm_backward_fp64(values["dy"], values["x"], values["w"], values["mean"], values["rstd"])
    return {name: OutputOracle(expected, scale) for name, (expected, scale) in result.items()}


def diagnose(out: torch.Tensor, call, evidence) -> str:
    """Name the common mistake an output matches (a hint, never a verdict). dx (``out`` 2-D): a
    term of dx left out, w left out of it, or rstd used as the standard deviation; dw or db
    (1-D): the other one's values (dw and db swapped), or, for dw, dy * x summed instead of
    dy * xhat. Each within the call's own bound."""
    placed = call.extra.get("placed")
    if not placed or out.dim() not in (1, 2):
        return ""
    dy, x, w, mean, rstd = (placed[k].double() for k in ("dy", "x", "w", "mean", "rstd"))
    if out.dim() == 1:
        return _diagnose_swapped(out, call, placed) or _diagnose_dw(out, call, dy, x)
    mean, rstd, expectation = mean[:, None], rstd[:, None], call.expectations(0)[0]
    candidates = {}
    xhat = (x - mean) * rstd
    c1, c2 = (xhat * dy).mean(-1, keepdim=True), dy.mean(-1, keepdim=True)
    candidates["(dy - (xhat*c1 + c2)) * rstd with c1, c2 from dy: the factor w is missing (wdy = w * dy)"] = (
        (dy - xhat * c1 - c2) * rstd)
    for words, xhat, scale in (("", (x - mean) * rstd, rstd), (" with xhat = (x - mean) / rstd", (x - mean) / rstd,
                                                                 1 / rstd)):
        wdy = w * dy
        c1, c2 = (xhat * wdy).mean(-1, keepdim=True), wdy.mean(-1, keepdim=True)
        if words:
            candidates["dx" + words + ": rstd was used as the standard deviation"] = (wdy - xhat * c1 - c2) * scale
        else:
            candidates["(w*dy - c2) * rstd: the xhat * c1 term of dx is missing"] = (wdy - c2) * scale
            candidates["(w*dy - xhat*c1) * rstd: the c2 = mean_j(w*dy) term of dx is missing"] = (wdy - xhat * c1) * scale
    for words, candidate in candidates.items():
        if out.shape == candidate.shape and compare(out, candidate, expectation.scale, expectation.tolerance).passed:
            return f" Your dx matches {words}."
    return ""


def _diagnose_dw(out: torch.Tensor, call, dy: torch.Tensor, x: torch.Tensor) -> str:  # noqa: ANN001
    """The dw mistake of summing dy * x (the raw input) over rows, where dw sums dy * xhat."""
    expectation = next((e for e in call.expectations(0) if e.name == "dw"), None)
    candidate = (dy * x).sum(0)
    if expectation is None or out.shape != candidate.shape or not compare(
            out, candidate, expectation.scale, expectation.tolerance).passed:
        return ""
    return (" Your dw matches sum over rows of dy * x, the raw input: dw must sum dy * xhat, the "
            "normalised input xhat = (x - mean) * rstd.")


def _diagnose_swapped(out: torch.Tensor, call, placed) -> str:
    """dw and db returned in each other's place: the failing 1-D output holds the other's values."""
    oracle = layernorm_backward_fp64(*(placed[k] for k in ("dy", "x", "w", "mean", "rstd")))
    expectations = {e.name: e for e in call.expectations(0)}
    for mine, other in (("dw", "db"), ("db", "dw")):
        expectation = expectations.get(mine)
        values, scale = oracle[other]
        if expectation is None or out.shape != values.shape or out.shape != expectation.expected.shape:
            continue
        if compare(out, expectation.expected, expectation.scale, expectation.tolerance).passed:
            continue  # this output is right: it is not the one that failed
        if compare(out, values, scale, expectation.tolerance).passed:
            return (f" Your {mine} matches {other} ({'sum_i dy' if other == 'db' else 'sum_i dy * xhat'}): dw and db are"
                    f" swapped; return (dx, dw, db) in that order.")
    return ""


def floor_bytes(shape: tuple[int, ...], dtype: str) -> dict[str, int]:
    """x and dy read, dx written (3 accesses per element of x), w read and dw, db written (N
    each), mean and rstd read (fp32); a kernel that cannot keep a row on chip reads x and dy
    twice (5 accesses). Partial buffers of dw/db are extra traffic a kernel chooses."""
    m, n = shape
    element = _ELEMENT_BYTES[dtype]
    rest = 3 * n * element + 2 * m * 4
    return {"min": 3 * m * n * element + rest, "two_pass": 5 * m * n * element + rest}


DECLARED = Declared(inputs=spec.INPUTS, outputs=spec.OUTPUTS, make_case=make_case, oracle=placed_oracle, checks=spec.checks,
                    hints=spec.HINTS, hint_requires=spec.HINT_REQUIRES, diagnose=diagnose)


class LayernormBackward:
    """``layernorm_backward(dy, x, w, mean, rstd) -> (dx, dw, db)`` (grader.assignments.protocol.Assignment)."""

    manifest = get_manifest("layernorm_backward")
    inputs = spec.INPUTS
    outputs = spec.OUTPUTS
    declared = DECLARED
    check_names = spec.CHECK_NAMES
    gpu_only_checks = spec.GPU_ONLY_CHECKS
    reference_file = HERE / "reference.py"
    template_file = HERE / "template.py"
    crash_hint = spec.CRASH_HINT
    benchmark = BenchmarkSpec(
        shapes=spec.BENCHMARK_SHAPES,
        dtypes=spec.BENCHMARK_DTYPES,
        baseline="torch_fp32_expression",
        peers=("torch_fp32_expression", "aten_native_layer_norm_backward", "reference",
               "torch_compile_fp32_expression"),
        scopes={
            "student": "one call of the submission's layernorm_backward(dy, x, w, mean, rstd): its Python wrapper "
                       "(validation, output and scratch allocation, zeroing) and every kernel it launches",
            "aten_native_layer_norm_backward": "torch.ops.aten.native_layer_norm_backward "
                                               "(dy, x, (N,), mean, rstd, w, None, [True, True, True]): the kernels "
                                               "LayerNorm's autograd node runs (dx, then dw and db by a column "
                                               "reduction)",
            "torch_fp32_expression": "the assignment's baseline: the closed form in PyTorch operators: casts to fp32, "
                                     "xhat, the two row sums, dx, and dw, db as column sums, then casts back",
            "reference": "the course reference kernels (grader/assignments/layernorm_backward/reference.py) with "
                         "their wrapper",
            "torch_compile_fp32_expression": "torch.compile(torch_fp32_expression, dynamic=False, fullgraph=True), "
                                             "compiled once per shape and dtype before timing",
        },
        floor=Floor("bandwidth", bytes=floor_bytes),
        # Rows of dx need the same rows of dy, x, mean and rstd; dw and db need every row.
        selection=TimedSelection(draws={"M": 2}, outputs={"dx": ("M", None), "dw": (None,), "db": (None,)},
                                 inputs=(("M", None), ("M", None), (None,), ("M",), ("M",))),
        oracle=benchmark_oracle,
        bench_file=HERE / "bench.py",
        oracle_file=HERE / "oracle.py",
    )

    def build_plan(self, *, seed: int, device: str):
        return build_plan(DECLARED, seed=seed, device=device, check_names=self.check_names,
                          assignment=self.manifest.name)

    def tolerance(self, dtype: torch.dtype, output: str | None = None) -> Tolerance:
        return spec.TOLERANCES[str(dtype).replace("torch.", "")]


ASSIGNMENT = LayernormBackward()
