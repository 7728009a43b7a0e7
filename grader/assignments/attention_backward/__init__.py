"""Assignment ``attention_backward``: dq, dk, dv of causal softmax attention from the saved out
and lse, as Triton kernels (FlashAttention-2's backward interface). The folder's files are
described in grader/assignments/protocol.py; ``ASSIGNMENT`` is what the generic grader uses."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import torch

from grader.assignments.attention_backward import bench, spec
from grader.assignments.attention_backward.inputs import make_case
from grader.assignments.attention_backward.oracle import backward_fp64, benchmark_oracle
from grader.assignments.protocol import BenchmarkSpec, Declared, Floor, OutputOracle, TimedSelection
from grader.checks.generic import build_plan
from grader.checks.tolerance import Tolerance, compare
from grader.manifest import get_manifest

HERE = Path(__file__).resolve().parent


def placed_oracle(values: Mapping) -> dict[str, OutputOracle]:
    """{"dq", "dk", "dv": oracle}: the closed form on the inputs as placed (oracle.py)."""
    found = backward_fp64(*(values[name] for name in ("q", "k", "v", "out", "dout", "lse")))
    return {name: OutputOracle(*found[name]) for name in ("dq", "dk", "dv")}


def _dq(q, k, v, do, lse, o, *, base2_lse: bool = False, delta: bool = True) -> torch.Tensor:
    """dq of a known mistake, fp64: the natural-log lse used as a base-2 one, or no Delta."""
    d, length = q.shape[-1], q.shape[-2]
    s = (q @ k.transpose(-1, -2)) / math.sqrt(d)
    allowed = torch.ones(length, length, dtype=torch.bool).tril()
    exponent = s * math.log2(math.e) - lse[..., None] if base2_lse else s - lse[..., None]
    p = (torch.exp2(exponent) if base2_lse else torch.exp(exponent)).masked_fill(~allowed, 0.0)
    dp = do @ v.transpose(-1, -2)
    ds = p * (dp - (do * o).sum(-1, keepdim=True)) if delta else p * dp
    return ds @ k / math.sqrt(d)


def diagnose(out: torch.Tensor, call, evidence) -> str:
    """Name the common mistake dq (``out``) matches (a hint, never a verdict): NaN exactly in the
    rows where an unmasked key's exp(s - lse) makes dS overflow the input dtype (no causal
    mask), the inputs rounded to bfloat16, the natural-log lse used in base 2, dS without
    Delta; each within the call's own bound, and only where exactly one matches."""
    placed = call.extra.get("placed")
    if not placed or out.dim() != 4:
        return ""
    q, k, v, o, do, lse = (placed[name].double() for name in ("q", "k", "v", "out", "dout", "lse"))
    not_finite = ~torch.isfinite(out.double())
    if bool(not_finite.any()):
        # Without the mask, P = exp(s - lse) of a key j > i can be far above 1 (lse normalises
        # only the keys j <= i): dS = P (dP - Delta) then overflows the input dtype when it is
        # rounded for its dot. Named only when every non-finite row of dq is such a row.
        exponent = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) - lse[..., None]
        ds = torch.exp(exponent) * (do @ v.transpose(-1, -2) - (do * o).sum(-1, keepdim=True))
        overflowing = (ds.abs() > torch.finfo(out.dtype).max).any(-1)
        bad_rows = not_finite.any(-1)
        if bool(bad_rows.any()) and bool((overflowing | ~bad_rows).all()):
            return (f" Your dq is NaN or inf at {int(not_finite.sum())} elements, exactly in rows where P = exp(s - lse)"
                    " of keys j > i makes dS overflow the input dtype (lse normalises only the keys j <= i): keys"
                    " j > i must be masked before the exponential (P = 0 there).")
        return ""
    expectation = call.expectations(0)[0]
    # dq as a kernel computes it (the given lse and out) from q, k, v and dout kept to bf16's bits
    bf16 = _dq(*(t.to(torch.bfloat16).double() for t in (q, k, v, do)), lse, o)
    candidates = {
        # Equal to the oracle on the 2^-5 grid, so only a full-precision case can match it.
        "the dq of q, k, v and dout rounded to bfloat16 (8 significant bits): keep every input in its own dtype "
        "(no tl.bfloat16 cast of a float16 input)": bf16,
        "P = 2^(s log2(e) - lse): the natural-log lse used as a base-2 one (multiply lse by log2(e) too)":
            _dq(q, k, v, do, lse, o, base2_lse=True),
        "dS = P * dP, without Delta = rowsum(dout * out)": _dq(q, k, v, do, lse, o, delta=False),
    }
    matches = [words for words, candidate in candidates.items()
               if out.shape == candidate.shape and compare(out, candidate, expectation.scale, expectation.tolerance,
                                                           expectation.slack).passed]
    return f" Your dq matches {matches[0]}." if len(matches) == 1 else ""


def _floor_bytes(shape: tuple[int, ...], dtype: str) -> dict[str, int]:
    """Eight (B, H, S, D) tensors once and lse; a FlashAttention backward re-reads tiles from L2."""
    least = bench.min_bytes(shape, getattr(torch, dtype))
    return {"min": least, "two_pass": least}


DECLARED = Declared(inputs=spec.INPUTS, outputs=spec.OUTPUTS, make_case=make_case, oracle=placed_oracle,
                    checks=spec.checks, hints=spec.HINTS, hint_requires=spec.HINT_REQUIRES, diagnose=diagnose)


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
            "flex_attention_autograd_compiled": "torch.compile of flex_attention (Inductor's forward and backward "
                                                "templates) with a causal block mask built once per length, the "
                                                "autograd around it eager, forward recomputed as for the baseline",
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
