"""Seeded inputs of ``gemm_epilogue``'s checks. Every value comes from the plan's one
torch.Generator; all are fp64 (the plan rounds them to the call's dtype)."""

from __future__ import annotations

import torch

#: Range of the bias in ``random_case``: z = a @ b + bias then spans about [-5, 3.5], through
#: GELU's flat negative tail (where the erf GELU differs most) and its near-linear right side.
BIAS_RANGE = (-3.5, 1.5)


def random_case(generator: torch.Generator, m: int, n: int, k: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(a, b, bias): a ~ N(0, 1) (m, k), b ~ N(0, 1) * 1.5/sqrt(k) (k, n), so that a @ b has a
    standard deviation of 1.5 at every K, and bias ~ U(BIAS_RANGE) (n,), distinct per column (a
    bias read along rows instead shows)."""
    a = torch.randn(m, k, generator=generator, dtype=torch.float64)
    b = torch.randn(k, n, generator=generator, dtype=torch.float64) * (1.5 / k**0.5)
    low, high = BIAS_RANGE
    bias = torch.rand(n, generator=generator, dtype=torch.float64) * (high - low) + low
    return a, b, bias


def epilogue_case(generator: torch.Generator, m: int, n: int, k: int
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(a, b, bias) whose z = a @ b + bias covers GELU's whole shape: a small random product
    (standard deviation 0.25) plus a bias that walks [-8, 8] across the columns, and in the last
    column 64 and in the one before it -64 (exp(2y) overflows fp32 once |z| > 11, so a tanh
    written as (e^2y - 1)/(e^2y + 1) gives NaN there). Needs n >= 3."""
    a = torch.randn(m, k, generator=generator, dtype=torch.float64)
    b = torch.randn(k, n, generator=generator, dtype=torch.float64) * (0.25 / k**0.5)
    bias = torch.linspace(-8.0, 8.0, n, dtype=torch.float64)
    bias[-2], bias[-1] = -64.0, 64.0
    return a, b, bias


def cancellation_case(generator: torch.Generator, m: int, n: int, k: int
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(a, b, bias) whose partial sums over K are far larger than the result.

    The first k/2 products are positive (a, b >= 0 there), so a running sum grows to ~k/4;
    the second half of a is the first half negated plus a small perturbation (sd 0.05) and b
    repeats its first half, so the total falls back to ~0.3. An accumulator that rounds its
    partial sums to fp16 (or bf16) at every K block loses ~2^-12 of ~k/4 per block, 10x more
    than the fp32 bound allows at k = spec.ACCUMULATION_K; bias is small, so no allowed
    rounding of z hides it.

    Raises:
        ValueError: ``k`` is odd.
    """
    if k % 2:
        raise ValueError(f"cancellation_case needs an even k, got {k}")
    half = k // 2
    first = torch.rand(m, half, generator=generator, dtype=torch.float64) + 0.5
    second = -first + 0.05 * torch.randn(m, half, generator=generator, dtype=torch.float64)
    column = torch.rand(half, n, generator=generator, dtype=torch.float64) + 0.5
    a = torch.cat([first, second], dim=1)
    b = torch.cat([column, column], dim=0)
    bias = torch.rand(n, generator=generator, dtype=torch.float64) - 0.5
    return a, b, bias
