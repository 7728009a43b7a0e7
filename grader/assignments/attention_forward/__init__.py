"""Assignment ``attention_forward``: causal softmax attention on (B, H, S, D) tensors as Triton
kernels, FlashAttention style (an online softmax over key blocks). The folder's files are
described in grader/assignments/protocol.py; ``ASSIGNMENT`` is what the generic grader uses."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import torch

from grader.assignments.attention_forward import bench, spec
from grader.assignments.attention_forward.inputs import make_case
from grader.assignments.attention_forward.oracle import attention_fp64, benchmark_oracle
from grader.assignments.protocol import BenchmarkSpec, Declared, Floor, OutputOracle, TimedSelection
from grader.checks.generic import build_plan
from grader.checks.tolerance import Tolerance, compare
from grader.manifest import get_manifest

HERE = Path(__file__).resolve().parent


def placed_oracle(values: Mapping) -> dict[str, OutputOracle]:
    """{"out": oracle}: causal attention of the inputs as placed, its scale and slack (oracle.py)."""
    return {"out": OutputOracle(*attention_fp64(values["q"], values["k"], values["v"]))}


def _variant(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float, causal: bool) -> torch.Tensor:
    scores = (q @ k.transpose(-1, -2)) * scale
    if causal:
        length = scores.shape[-1]
        scores = scores.masked_fill(~torch.ones(length, length, dtype=torch.bool).tril(), -math.inf)
    return torch.softmax(scores, dim=-1) @ v


def diagnose(out: torch.Tensor, call, evidence) -> str:
    """Name the common mistake ``out`` matches (a hint, never a verdict): no causal mask, no
    1/sqrt(D) scale, a 1/D scale; each within the call's own bound, and only where exactly one
    of them matches."""
    placed = call.extra.get("placed")
    if not placed or out.dim() != 4 or out.shape[-2] < 2:
        return ""
    q, k, v = (placed[name].double() for name in ("q", "k", "v"))
    d = q.shape[-1]
    expectation = call.expectations(0)[0]
    candidates = {
        "attention without the causal mask (every query attends to every key)":
            _variant(q, k, v, scale=d**-0.5, causal=False),
        "scores without the 1/sqrt(D) scale": _variant(q, k, v, scale=1.0, causal=True),
        "scores scaled by 1/D instead of 1/sqrt(D)": _variant(q, k, v, scale=1.0 / d, causal=True),
    }
    matches = [words for words, candidate in candidates.items()
               if out.shape == candidate.shape and compare(out, candidate, expectation.scale, expectation.tolerance,
                                                           expectation.slack).passed]
    return f" Your output matches {matches[0]}." if len(matches) == 1 else ""


def _floor_bytes(shape: tuple[int, ...], dtype: str) -> dict[str, int]:
    """q, k, v read once and out written once; FlashAttention re-reads k and v per query block
    from L2, not DRAM, so the two-pass figure is the same."""
    least = bench.min_bytes(shape, getattr(torch, dtype))
    return {"min": least, "two_pass": least}


DECLARED = Declared(inputs=spec.INPUTS, outputs=spec.OUTPUTS, make_case=make_case, oracle=placed_oracle,
                    checks=spec.checks, hints=spec.HINTS, hint_requires=spec.HINT_REQUIRES, diagnose=diagnose)


class AttentionForward:
    """``attention_forward(q, k, v) -> out`` (grader.assignments.protocol.Assignment)."""

    manifest = get_manifest("attention_forward")
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
        baseline="torch_sdpa",
        peers=("torch_sdpa", "sdpa_flash", "reference", "flex_attention_compiled"),
        scopes={
            "student": "one call of the submission's attention_forward(q, k, v): its Python wrapper (validation, "
                       "output allocation) and every kernel it launches",
            "torch_sdpa": "the assignment's baseline: F.scaled_dot_product_attention(q, k, v, is_causal=True), "
                          "PyTorch's choice of backend (its flash backend for fp16/bf16 on an H200)",
            "sdpa_flash": "the same call restricted to SDPBackend.FLASH_ATTENTION (FlashAttention-2's kernels in "
                          "PyTorch); an error in its cell where that backend does not run",
            "reference": "the course reference kernel (grader/assignments/attention_forward/reference.py) with its "
                         "wrapper",
            "flex_attention_compiled": "torch.compile(flex_attention with a causal block mask, fullgraph), compiled "
                                       "once per shape and dtype before timing; the block mask is built inside "
                                       "each timed call",
        },
        # Compute-bound at these lengths: the causal FLOP count over the measured tensor-core
        # throughput; the bytes side is four tensors once.
        floor=Floor("roofline", bytes=_floor_bytes, flops=lambda shape, dtype: bench.flops(shape)),
        # Query rows of out need the same query rows of q and every key and value of their
        # batch and head.
        selection=TimedSelection(draws={"B": 1, "H": 1, "S": 2}, outputs={"out": ("B", "H", "S", None)},
                                 inputs=(("B", "H", "S", None), ("B", "H", None, None), ("B", "H", None, None))),
        oracle=benchmark_oracle,
        bench_file=HERE / "bench.py",
        oracle_file=HERE / "oracle.py",
    )

    def build_plan(self, *, seed: int, device: str):
        return build_plan(DECLARED, seed=seed, device=device, check_names=self.check_names,
                          assignment=self.manifest.name)

    def tolerance(self, dtype: torch.dtype, output: str | None = None) -> Tolerance:
        return spec.TOLERANCES[str(dtype).replace("torch.", "")]


ASSIGNMENT = AttentionForward()
