"""Seeded inputs of ``gemm_epilogue``'s checks. Every value comes from the plan's one
torch.Generator; all are fp64 (the plan rounds them to the call's dtype)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from grader.assignments.protocol import Case

#: Range of the bias in the random case: z = a @ b + bias then spans about [-8, 6], through
#: GELU's flat negative tail (where the erf GELU differs most) and its near-linear right side.
BIAS_RANGE = (-6.0, 4.0)
#: Two columns of the random case get these biases (when N >= 3): exp(2y) overflows fp32 once
#: |z| > 11, so a tanh written as (e^2y - 1)/(e^2y + 1) gives inf/inf = NaN there.
LARGE_BIASES = (-64.0, 64.0)


def make_case(generator: torch.Generator, dims: Mapping[str, int], exact: bool = False) -> Case:
    """One call's (a, b, bias), fp64, for sizes dims["M"], dims["N"], dims["K"].

    exact=False: a ~ N(0, 1) (M, K); b ~ N(0, 1) * 1.5/sqrt(K) (K, N), so a @ b has a standard
    deviation of 1.5 at every K; bias ~ U(BIAS_RANGE) (N,), distinct per column (a bias read
    along rows shows), two random columns at LARGE_BIASES.

    exact=True (K even): partial sums far larger than the result, every one exact in fp32.
    The first K/2 products are positive (a, b multiples of 2^-4 in [0.5, 1.5)), so a running
    sum grows to ~K/2; the second half of a is the first half negated plus -1/16, 0 or 1/16,
    and b repeats its first half, so the total falls back to ~0.5. Products are multiples of
    2^-8 below 2.4 and every partial sum is below 2^9 for K <= 256, so any fp32 summation order is
    exact;
    an accumulator of fp16 or bf16 (11 or 8 bits) rounds the partial sums near K/2 by up to
    2^-12 of them, far outside the bound once the fp32 error is 0. bias is a multiple of 2^-4
    in [-0.5, 0.5).

    Raises:
        ValueError: exact=True with an odd K.
    """
    m, n, k = dims["M"], dims["N"], dims["K"]
    if not exact:
        a = torch.randn(m, k, generator=generator, dtype=torch.float64)
        b = torch.randn(k, n, generator=generator, dtype=torch.float64) * (1.5 / k**0.5)
        low, high = BIAS_RANGE
        bias = torch.rand(n, generator=generator, dtype=torch.float64) * (high - low) + low
        if n >= 3:
            bias[torch.randperm(n, generator=generator)[:2]] = torch.tensor(LARGE_BIASES, dtype=torch.float64)
        return Case(values={"a": a, "b": b, "bias": bias})
    if k % 2:
        raise ValueError(f"the exact gemm_epilogue case needs an even K, got {k}")
    half = k // 2
    first = torch.randint(8, 24, (m, half), generator=generator).to(torch.float64) / 16
    second = -first + torch.randint(-1, 2, (m, half), generator=generator).to(torch.float64) / 16
    column = torch.randint(8, 24, (half, n), generator=generator).to(torch.float64) / 16
    bias = torch.randint(-8, 8, (n,), generator=generator).to(torch.float64) / 16
    return Case(values={"a": torch.cat([first, second], dim=1), "b": torch.cat([column, column], dim=0), "bias": bias})
