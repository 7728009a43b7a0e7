"""Seeded inputs of ``softmax_backward``'s checks: logits with varied spread, upstream gradients
with varied means, and rows whose arithmetic is exact. Every value comes from the plan's one
torch.Generator."""

from __future__ import annotations

import math

import torch

#: Per-row logit spreads, cycled: near-uniform rows (0.1, every y ~ 1/N), moderate ones and
#: rows whose probabilities span 20 orders of magnitude (25).
LOGIT_SPREADS = (1.0, 6.0, 0.1, 25.0)
#: Per-row means of g, cycled. Row 0 has a large mean, so dot = sum(y*g) is large on the first
#: row of every input: an error in dot shows on row 0 as on every other row (a mean-0 first row
#: once made precision errors vanish there, and "every row from row 1 on is wrong" then read as
#: a grid that launches too few programs). The mean-0 row comes last in the cycle.
UPSTREAM_MEANS = (3.0, -1.5, 0.5, 0.0)


def make_logits(generator: torch.Generator, rows: int, cols: int) -> torch.Tensor:
    """Logits x (rows, cols) in fp64 with per-row spread cycling through LOGIT_SPREADS.

    Large spreads give probabilities spanning many orders of magnitude (tiny y next to y ~ 1);
    a spread of 0.1 gives a near-uniform row where every y is ~1/N.
    """
    spreads = torch.tensor(LOGIT_SPREADS, dtype=torch.float64)[torch.arange(rows) % len(LOGIT_SPREADS)].unsqueeze(1)
    return torch.randn(rows, cols, generator=generator, dtype=torch.float64) * spreads


def make_upstream(generator: torch.Generator, rows: int, cols: int) -> torch.Tensor:
    """Upstream gradient g (rows, cols) in fp64; row means cycle through UPSTREAM_MEANS.

    A non-zero mean makes dot = sum(y*g) large, so a wrong or low-precision dot is visible.
    """
    means = torch.tensor(UPSTREAM_MEANS, dtype=torch.float64)[torch.arange(rows) % len(UPSTREAM_MEANS)].unsqueeze(1)
    return torch.randn(rows, cols, generator=generator, dtype=torch.float64) + means


def random_case(generator: torch.Generator, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x, y = softmax(x), g), all fp64 (rows, cols)."""
    x = make_logits(generator, rows, cols)
    g = make_upstream(generator, rows, cols)
    return x, torch.softmax(x, dim=-1), g


#: Row constants of g in ``exact_case``: at most 8 significant bits and multiples of 2^-6.
EXACT_ROW_CONSTANTS = (201 / 64, -1.5, 0.5, 2.25)
#: Large probabilities per row of ``exact_case`` (each 2^-4, so together 1/2).
EXACT_PEAKS = 8


def exact_case(generator: torch.Generator, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, g) fp64 (rows, cols) whose products y*g are exact in float16 and bfloat16 and whose
    fp32 sums are exact, so any arithmetic the assignment allows is exact up to the final
    rounding, and an error in half precision shows against a tight bound.

    y: EXACT_PEAKS entries of 2^-4 at random columns, every other entry 2^-(ceil(log2 N) + 1),
    so a row sums to about 1 (1/2 + (N - 8) / 2N). g: a row constant from EXACT_ROW_CONSTANTS
    plus -2^-5, 0 or +2^-5 per element, at most 8 significant bits. Products are then powers of
    two times 8-bit numbers, at or above 2^-24 apart (exact in fp16 subnormals and in bf16).
    The peaks carry half of dot, so an error in dot reaches outputs of size ~2^-4, far above
    fp16's subnormal range; a half-precision accumulator rounds its partial sums, a fp32 one
    does not.

    Args:
        generator: the plan's generator.
        rows: M >= 1.
        cols: N, a power of two >= 2 * EXACT_PEAKS.

    Raises:
        ValueError: ``cols`` is not a power of two of at least 2 * EXACT_PEAKS.
        RuntimeError: a product is not exact in float16 or bfloat16 (a bug in this generator).
    """
    if cols < 2 * EXACT_PEAKS or cols & (cols - 1):
        raise ValueError(f"exact_case needs a power-of-two row length >= {2 * EXACT_PEAKS}, got {cols}")
    small = 2.0 ** -(int(math.log2(cols)) + 1)
    y = torch.full((rows, cols), small, dtype=torch.float64)
    for row in range(rows):
        y[row, torch.randperm(cols, generator=generator)[:EXACT_PEAKS]] = 2.0 ** -4
    constants = torch.tensor(EXACT_ROW_CONSTANTS, dtype=torch.float64)[torch.arange(rows) % len(EXACT_ROW_CONSTANTS)]
    steps = torch.randint(-1, 2, (rows, cols), generator=generator).to(torch.float64) * 2.0 ** -5
    g = constants.unsqueeze(1) + steps
    products = y * g
    for dtype in (torch.float16, torch.bfloat16):
        if not (torch.equal(y.to(dtype).double(), y) and torch.equal(g.to(dtype).double(), g)
                and torch.equal(products.to(dtype).double(), products)):
            raise RuntimeError(f"exact_case: an input or product is not exact in {dtype}")
    return y, g
