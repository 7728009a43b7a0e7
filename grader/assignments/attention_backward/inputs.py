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
