"""Seeded inputs of ``softmax_backward``'s checks: logits with varied spread, upstream gradients
with varied means. Every value comes from the plan's one torch.Generator."""

from __future__ import annotations

import torch


def make_logits(generator: torch.Generator, rows: int, cols: int) -> torch.Tensor:
    """Logits x (rows, cols) in fp64 with per-row spread cycling through 1, 6, 0.1, 25.

    Large spreads give probabilities spanning many orders of magnitude (tiny y next to y ~ 1);
    a spread of 0.1 gives a near-uniform row where every y is ~1/N.
    """
    spreads = torch.tensor([1.0, 6.0, 0.1, 25.0], dtype=torch.float64)[torch.arange(rows) % 4].unsqueeze(1)
    return torch.randn(rows, cols, generator=generator, dtype=torch.float64) * spreads


def make_upstream(generator: torch.Generator, rows: int, cols: int) -> torch.Tensor:
    """Upstream gradient g (rows, cols) in fp64; row means cycle through 0, 3, -1.5, 0.5.

    A non-zero mean makes dot = sum(y*g) large, so a wrong or low-precision dot is visible.
    """
    means = torch.tensor([0.0, 3.0, -1.5, 0.5], dtype=torch.float64)[torch.arange(rows) % 4].unsqueeze(1)
    return torch.randn(rows, cols, generator=generator, dtype=torch.float64) + means


def random_case(generator: torch.Generator, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x, y = softmax(x), g), all fp64 (rows, cols)."""
    x = make_logits(generator, rows, cols)
    g = make_upstream(generator, rows, cols)
    return x, torch.softmax(x, dim=-1), g
