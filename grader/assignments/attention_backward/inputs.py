"""Seeded inputs of ``attention_backward``'s checks. Every value comes from the plan's one
torch.Generator; all are fp64 (the plan rounds them to the call's dtype)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from grader.assignments.protocol import Case

#: q, k, v and dout are multiples of 2^-5 below 4 in magnitude: 7 significant bits, exact in
#: float16 and bfloat16, so that out and lse computed here in fp64 are those of the inputs as
#: the call gets them, whatever its dtype (make_case does not know it).
GRID = 32.0


def _exact(generator: torch.Generator, shape: tuple[int, ...], std: float) -> torch.Tensor:
    values = torch.randn(shape, generator=generator, dtype=torch.float64) * std
    return (values * GRID).round().clamp(-127, 127) / GRID


def make_case(generator: torch.Generator, dims: Mapping[str, int], exact: bool = False) -> Case:
    """One call's (q, k, v, out, dout, lse), fp64: q, k ~ N(0, 1.5^2), v, dout ~ N(0, 1), each
    on the 2^-5 grid (GRID); out and lse the fp64 forward of those (the placement rounds out to
    the call's dtype and lse to float32, as a forward kernel would have saved them)."""
    from grader.assignments.attention_backward.oracle import forward_fp64

    shape = (dims["B"], dims["H"], dims["S"], dims["D"])
    q, k = _exact(generator, shape, 1.5), _exact(generator, shape, 1.5)
    v, dout = _exact(generator, shape, 1.0), _exact(generator, shape, 1.0)
    out, lse = forward_fp64(q, k, v)
    return Case(values={"q": q, "k": k, "v": v, "out": out, "dout": dout, "lse": lse})


#: The spread of q and k in full_precision_case: small, so that M (the scores' magnitude, which
#: scales the allowed roundings of P, dS and q times the scale) is small and the bound is near
#: one ulp of the input dtype: q, k, v and dout staged through bfloat16 then come out 2-4x the
#: bound, where with make_case's 1.5 they come out 1-2x it (seeds 0-2, (1, 2, 45, 16)).
FULL_PRECISION_QK_STD = 0.5


def full_precision_case(dtype: str):
    """``draw(generator, dims) -> Case``: q, k ~ N(0, FULL_PRECISION_QK_STD^2), v, dout ~ N(0, 1)
    rounded to ``dtype`` itself (every significant bit it has: 11 for float16), out and lse the
    fp64 forward of those (as the training step's calls are drawn).

    Why: every other case is on the 2^-5 grid (7 significant bits, exact in bfloat16), so a
    kernel that loses input bits down to bfloat16's 8 (inputs staged through tl.bfloat16,
    corpus wrong/inputs_through_bf16.py) is exact on all of them; the training step's calls have
    full-precision inputs but are the training shape only, and their loss bound is wide."""
    from grader.assignments.attention_backward.oracle import forward_fp64

    torch_dtype = getattr(torch, dtype)

    def draw(generator: torch.Generator, dims: Mapping[str, int]) -> Case:
        shape = (dims["B"], dims["H"], dims["S"], dims["D"])
        q, k, v, dout = (
            (torch.randn(shape, generator=generator, dtype=torch.float64) * std).to(torch_dtype).to(torch.float64)
            for std in (FULL_PRECISION_QK_STD, FULL_PRECISION_QK_STD, 1.0, 1.0))
        out, lse = forward_fp64(q, k, v)
        return Case(values={"q": q, "k": k, "v": v, "out": out, "dout": dout, "lse": lse},
                    label=f"{shape} {dtype}, full-precision inputs (off the 2^-5 grid)")

    return draw
