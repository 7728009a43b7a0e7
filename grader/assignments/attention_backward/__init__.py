"""Assignment ``attention_backward``: dq, dk, dv of causal softmax attention from the saved out
and lse, as Triton kernels (FlashAttention-2's backward interface). The folder's files are
described in grader/assignments/protocol.py; ``ASSIGNMENT`` is what the generic grader uses."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch

from grader.assignments.attention_backward import bench, spec
from grader.assignments.attention_backward.inputs import make_case
from grader.assignments.attention_backward.oracle import backward_fp64, benchmark_oracle
from grader.assignments.protocol import BenchmarkSpec, Declared, Floor, OutputOracle, TimedSelection
from grader.checks import Tolerance
from grader.generic_checks import build_plan
from grader.manifest import get_manifest

HERE = Path(__file__).resolve().parent


def placed_oracle(values: Mapping) -> dict[str, OutputOracle]:
    """{"dq", "dk", "dv": oracle}: the closed form on the inputs as placed (oracle.py)."""
    found = backward_fp64(*(values[name] for name in ("q", "k", "v", "out", "dout", "lse")))
    return {name: OutputOracle(*found[name]) for name in ("dq", "dk", "dv")}


def _floor_bytes(shape: tuple[int, ...], dtype: str) -> dict[str, int]:
    """Eight (B, H, S, D) tensors once and lse; a FlashAttention backward re-reads tiles from L2."""
    least = bench.min_bytes(shape, getattr(torch, dtype))
    return {"min": least, "two_pass": least}


DECLARED = Declared(inputs=spec.INPUTS, outputs=spec.OUTPUTS, make_case=make_case, oracle=placed_oracle,
                    checks=spec.checks, hints=spec.HINTS, hint_requires=spec.HINT_REQUIRES)


class AttentionBackward:
    """``attention_backward(q, k, v, out, dout, lse) -> (dq, dk, dv)``
    (grader.assignments.protocol.Assignment)."""

    manifest = get_manifest("attention_backward")
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
        baseline="sdpa_autograd",
        peers=("sdpa_autograd", "reference", "flex_attention_autograd_compiled"),
        scopes={
            "student": "one call of the submission's attention_backward(q, k, v, out, dout, lse): its wrapper and "
                       "every kernel it launches",
            "sdpa_autograd": "the baseline: autograd of F.scaled_dot_product_attention(is_causal=True) on leaf copies "
                             "of q, k, v: PyTorch's forward (recomputed) and backward kernels, plus three copies",
            "reference": "the course reference kernels (grader/assignments/attention_backward/reference.py)",
            "flex_attention_autograd_compiled": "torch.compile of FlexAttention's forward and backward with a causal "
                                                "block mask, forward recomputed as for the baseline",
        },
        floor=Floor("roofline", bytes=_floor_bytes, flops=lambda shape, dtype: bench.flops(shape)),
        # Every gradient row of a head needs every row of that head's inputs: one drawn batch and
        # head, compared whole.
        selection=TimedSelection(draws={"B": 1, "H": 1},
                                 outputs={name: ("B", "H", None, None) for name in ("dq", "dk", "dv")},
                                 inputs=(("B", "H", None, None),) * 5 + (("B", "H", None),)),
        oracle=benchmark_oracle,
        bench_file=HERE / "bench.py",
        oracle_file=HERE / "oracle.py",
    )

    def build_plan(self, *, seed: int, device: str):
        return build_plan(DECLARED, seed=seed, device=device, check_names=self.check_names,
                          assignment=self.manifest.name)

    def tolerance(self, dtype: torch.dtype, output: str | None = None) -> Tolerance:
        return spec.TOLERANCES[str(dtype).replace("torch.", "")]


ASSIGNMENT = AttentionBackward()
