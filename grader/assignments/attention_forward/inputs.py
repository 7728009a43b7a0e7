"""Seeded inputs of ``attention_forward``'s checks. Every value comes from the plan's one
torch.Generator; all are fp64 (the plan rounds them to the call's dtype)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from grader.assignments.protocol import Case

#: The causality case's values from the split on: far from every earlier value (v ~ N(0, 1)),
#: so that an earlier output that attends to any of them moves by ~FUTURE_VALUE times its
#: weight, thousands of times the bound; exact in fp16 and bf16.
FUTURE_VALUE = 64.0


def shape_of(dims: Mapping[str, int]) -> tuple[int, int, int, int]:
    return dims["B"], dims["H"], dims["S"], dims["D"]


def make_case(generator: torch.Generator, dims: Mapping[str, int], exact: bool = False) -> Case:
    """One call's (q, k, v), fp64, of shape (B, H, S, D) each: q, k ~ N(0, 1.5^2) (scores
    q.k / sqrt(D) of standard deviation 2.25: a softmax far from uniform, whose running maximum
    rises from one key block to the next, so an online softmax that does not rescale shows),
    v ~ N(0, 1). ``exact`` is not used (no exact-arithmetic case: the checks compare with the
    derived bound)."""
    shape = shape_of(dims)
    q = torch.randn(shape, generator=generator, dtype=torch.float64) * 1.5
    k = torch.randn(shape, generator=generator, dtype=torch.float64) * 1.5
    v = torch.randn(shape, generator=generator, dtype=torch.float64)
    return Case(values={"q": q, "k": k, "v": v})


def future_case(split: int):
    """``draw(generator) -> Case`` of the causality check: make_case's values, then every
    value row from position ``split`` on set to FUTURE_VALUE and its key to 3x its draw (a
    score that would dominate every earlier query's softmax, were it allowed there). A causal
    kernel's outputs before ``split`` are those of the values before it alone."""

    def draw(generator: torch.Generator, dims: Mapping[str, int]) -> Case:
        case = make_case(generator, dims)
        case.values["v"][..., split:, :] = FUTURE_VALUE
        case.values["k"][..., split:, :] *= 3.0
        case.label = (f"{tuple(shape_of(dims))} float16, keys x3 and values = {FUTURE_VALUE:g} from position {split} "
                      f"on (no output before {split} may see them)")
        return case

    return draw
