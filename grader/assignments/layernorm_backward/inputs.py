"""Seeded inputs of ``layernorm_backward``'s checks: x with varied row offsets and spreads, its
saved statistics, weights and upstream gradients. Every value comes from the plan's one
torch.Generator.

x is drawn with at most 8 significant bits (bf16-exact, and so exact in fp16 and fp32 too), so
that the statistics computed here from x in fp64 are the statistics of x as every call dtype
holds it: the given mean and rstd are then those the forward pass would have saved for the
rounded x (rounded to fp32, as it saves them), in float32, float16 and bfloat16 alike.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from grader.assignments.layernorm_backward.oracle import LN_EPS, statistics_fp64
from grader.assignments.protocol import Case

#: Per-row (offset, spread) of x, cycled: standard rows, the tutorial's -2.3 + 0.5 randn, rows
#: with a mean 8 times their spread (x - mean cancels), and nearly constant rows (rstd ~ 100).
ROW_SHAPES = ((0.0, 1.0), (-2.3, 0.5), (4.0, 0.5), (1.0, 0.01))


def _bf16_exact(values: torch.Tensor) -> torch.Tensor:
    """values rounded to 8 significant bits, with magnitudes under 2^-13 set to 0 (fp16's
    normal range starts at 2^-14, so every value is exact in fp16, bf16 and fp32)."""
    rounded = values.to(torch.bfloat16).to(torch.float64)
    return torch.where(rounded.abs() < 2.0**-13, torch.zeros_like(rounded), rounded)


def make_case(generator: torch.Generator, dims: Mapping[str, int], exact: bool = False) -> Case:
    """One call's (dy, x, w, mean, rstd), fp64, for sizes dims["M"], dims["N"]: x by ROW_SHAPES
    (bf16-exact), w ~ 1 + 0.5 N(0, 1) (distinct per column), dy ~ N(0, 1) + 0.3 (a non-zero
    mean, so c2 and db are not small), mean and rstd the fp64 statistics of x (eps
    oracle.LN_EPS; the plan rounds them to float32). ``exact`` is not used (the assignment has
    no exact generator). The hidden ``b`` (the forward's bias) only enters the loss of the
    central difference.
    """
    m, n = dims["M"], dims["N"]
    shapes = torch.tensor(ROW_SHAPES, dtype=torch.float64)[torch.arange(m) % len(ROW_SHAPES)]
    x = _bf16_exact(torch.randn(m, n, generator=generator, dtype=torch.float64) * shapes[:, 1:] + shapes[:, :1])
    w = 1.0 + 0.5 * torch.randn(n, generator=generator, dtype=torch.float64)
    b = 0.1 * torch.randn(n, generator=generator, dtype=torch.float64)
    dy = torch.randn(m, n, generator=generator, dtype=torch.float64) + 0.3
    mean, rstd = statistics_fp64(x, LN_EPS)
    return Case(values={"dy": dy, "x": x, "w": w, "mean": mean, "rstd": rstd}, hidden={"b": b})
