"""Assignment ``gemm_epilogue``: out = gelu_tanh(a @ b + bias) as one Triton kernel, the bias and
GELU fused into the GEMM's epilogue on the fp32 accumulator. The folder's files are described
in grader/assignments/protocol.py; ``ASSIGNMENT`` is what the generic grader uses."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import torch

from grader.assignments.gemm_epilogue import bench, spec
from grader.assignments.gemm_epilogue.inputs import make_case
from grader.assignments.gemm_epilogue.oracle import benchmark_oracle, gelu_tanh, gemm_gelu_fp64
from grader.assignments.protocol import BenchmarkSpec, Declared, Floor, OutputOracle, TimedSelection
from grader.checks.generic import build_plan
from grader.checks.tolerance import Tolerance, compare
from grader.manifest import get_manifest

HERE = Path(__file__).resolve().parent


def placed_oracle(values: Mapping) -> dict[str, OutputOracle]:
    """{"out": oracle}: the fp64 result of the inputs as placed, its scale and slack (oracle.py)."""
    a = values["a"]
    name = str(a.dtype).replace("torch.", "")
    return {"out": OutputOracle(*gemm_gelu_fp64(a, values["b"], values["bias"], spec.INTERMEDIATE_ROUNDING[name]))}


def diagnose(out: torch.Tensor, call, evidence) -> str:
    """Name the common mistake ``out`` matches (a hint, never a verdict): a tanh that overflows
    (NaN or inf only where tanh's argument is large), the erf GELU, the bias after GELU or
    missing, the bias along rows, no GELU; each within the call's own bound, and only where
    exactly one of them matches."""
    placed = call.extra.get("placed")
    if not placed or out.dim() != 2:
        return ""
    a, b, bias = (placed[k].double() for k in ("a", "b", "bias"))
    acc, expectation = a @ b, call.expectations(0)[0]
    z = acc + bias
    not_finite = ~torch.isfinite(out.double())
    if out.shape == z.shape and bool(not_finite.any()) and bool(torch.isfinite(z).all()):
        # tanh(u) as (e^2u - 1) / (e^2u + 1) is inf/inf = NaN once 2|u| > log(fp32 max) = 88.72.
        u = (2 / math.pi) ** 0.5 * (z + 0.044715 * z**3)
        if bool((2 * u.abs() > math.log(torch.finfo(torch.float32).max))[not_finite].all()):
            return (f" Your output is NaN or inf at {int(not_finite.sum())} elements, all where GELU's tanh"
                    f" argument u is beyond +-44: tanh written with exp(2u) overflows fp32 there (inf/inf)."
                    f" Write it in a form that cannot overflow, e.g. 2 * sigmoid(2u) - 1.")
    candidates = {
        "the erf GELU (F.gelu's default), not the tanh approximation": 0.5 * z * (1 + torch.erf(z / 2**0.5)),
        "gelu(a @ b) + bias: the bias was added after GELU": gelu_tanh(acc) + bias,
        "gelu(a @ b): the bias is missing": gelu_tanh(acc),
        "a @ b + bias: GELU is missing": z,
    }
    if a.shape[0] <= b.shape[1]:
        candidates["the bias added along rows (bias[row]) instead of columns"] = gelu_tanh(acc + bias[:a.shape[0], None])
    matches = [words for words, candidate in candidates.items()
               if out.shape == candidate.shape and compare(out, candidate, expectation.scale, expectation.tolerance,
                                                           expectation.slack).passed]
    # Two mistakes that give the same values here (bias[0] = 0 on rows is no bias) cannot be told apart.
    return f" Your output matches {matches[0]}." if len(matches) == 1 else ""


def _floor_bytes(shape: tuple[int, ...], dtype: str) -> dict[str, int]:
    """a, b, bias read once and out written once; a GEMM re-reads tiles from L2, not DRAM, so
    the two-pass figure is the same."""
    least = bench.min_bytes(shape, getattr(torch, dtype))
    return {"min": least, "two_pass": least}


DECLARED = Declared(inputs=spec.INPUTS, outputs=spec.OUTPUTS, make_case=make_case, oracle=placed_oracle, checks=spec.checks,
                    hints=spec.HINTS, hint_requires=spec.HINT_REQUIRES, diagnose=diagnose)


class GemmEpilogue:
    """``gemm_epilogue(a, b, bias) -> out`` (grader.assignments.protocol.Assignment)."""

    manifest = get_manifest("gemm_epilogue")
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
        baseline="torch_unfused_expression",
        peers=("torch_unfused_expression", "cublaslt_fused_epilogue", "reference", "torch_compile_unfused_expression"),
        scopes={
            "student": "one call of the submission's gemm_epilogue(a, b, bias): its Python wrapper (validation, "
                       "output allocation) and every kernel it launches",
            "torch_unfused_expression": "the assignment's baseline: F.gelu(a @ b + bias, approximate='tanh'): a cuBLAS "
                                        "GEMM rounded to the input dtype, then the bias add and GELU as elementwise "
                                        "kernels, no autograd",
            "cublaslt_fused_epilogue": "torch._addmm_activation(bias, a, b, use_gelu=True): cuBLASLt's GEMM with its "
                                       "fused bias + GELU epilogue (CUBLASLT_EPILOGUE_GELU_BIAS), one kernel",
            "reference": "the course reference kernel (grader/assignments/gemm_epilogue/reference.py) with its wrapper",
            "torch_compile_unfused_expression": "torch.compile(baseline, dynamic=False, fullgraph=True), compiled once "
                                                "per shape and dtype before timing; guard checks included in event timing",
        },
        # Compute-bound at these sizes: 2MNK FLOPs over the measured tensor-core throughput; the
        # bytes side matters for the skinny row (M = 128).
        floor=Floor("roofline", bytes=_floor_bytes, flops=lambda shape, dtype: bench.flops(shape)),
        # Rows of out need the same rows of a and all of b and bias.
        selection=TimedSelection(draws={"M": 2}, outputs={"out": ("M", None)},
                                 inputs=(("M", None), (None, None), (None,))),
        oracle=benchmark_oracle,
        bench_file=HERE / "bench.py",
        oracle_file=HERE / "oracle.py",
    )

    def build_plan(self, *, seed: int, device: str):
        return build_plan(DECLARED, seed=seed, device=device, check_names=self.check_names,
                          assignment=self.manifest.name)

    def tolerance(self, dtype: torch.dtype, output: str | None = None) -> Tolerance:
        return spec.TOLERANCES[str(dtype).replace("torch.", "")]


ASSIGNMENT = GemmEpilogue()
