"""Seeded inputs of ``softmax_cross_entropy_backward``'s checks: logits with varied spread and
offset, targets that hit the first and last class, ignored rows, and logits at +-1e4.

Every value comes from the plan's one torch.Generator; everything is float64 (logits) or int64
(targets) here, and the checks round the logits to the dtype under test.
"""

from __future__ import annotations

import torch

from grader.assignments.softmax_cross_entropy_backward.spec import DEFAULT_IGNORE_INDEX, LARGE_LOGIT

#: Per-row logit spread (standard deviation) and offset, cycled over rows. A spread of 0.1 gives
#: a near-uniform row (every p ~ 1/C); 10 gives p spanning ~40 orders of magnitude; the offsets
#: move whole rows to +20 and -30 (exp(x) stays finite in fp32 without the max, which only
#: stability_large_logits tests).
ROW_SPREADS = (1.0, 4.0, 0.1, 10.0)
ROW_OFFSETS = (0.0, 20.0, -30.0, 5.0)


def make_logits(generator: torch.Generator, rows: int, cols: int) -> torch.Tensor:
    """Logits x (rows, cols) in fp64: N(offset, spread^2) per row, spread and offset cycling
    through ROW_SPREADS and ROW_OFFSETS."""
    index = torch.arange(rows) % len(ROW_SPREADS)
    spreads = torch.tensor(ROW_SPREADS, dtype=torch.float64)[index].unsqueeze(1)
    offsets = torch.tensor(ROW_OFFSETS, dtype=torch.float64)[index].unsqueeze(1)
    return torch.randn(rows, cols, generator=generator, dtype=torch.float64) * spreads + offsets


def make_targets(generator: torch.Generator, rows: int, cols: int, *, ignored: tuple[int, ...] | range = (),
                 ignore_index: int = DEFAULT_IGNORE_INDEX) -> torch.Tensor:
    """Targets t (rows,) int64: uniform classes in [0, cols), the first row's class 0 and the last
    row's class cols - 1 (the ends of the row, where an off-by-one mask shows), and
    ``ignore_index`` at the rows listed in ``ignored``."""
    t = torch.randint(0, cols, (rows,), generator=generator, dtype=torch.int64)
    t[0] = 0
    if rows > 1:
        t[-1] = cols - 1
    for row in ignored:
        t[row] = ignore_index
    return t


def every_third_row(rows: int) -> range:
    """Rows 1, 4, 7, ...: the ignored rows of the checks that mix valid and ignored rows (row 0
    and the last row keep their targets when rows % 3 != 2)."""
    return range(1, rows - 1, 3)


def random_case(generator: torch.Generator, rows: int, cols: int, *, ignored: tuple[int, ...] | range = (),
                ignore_index: int = DEFAULT_IGNORE_INDEX) -> tuple[torch.Tensor, torch.Tensor]:
    """(x, t): fp64 logits (rows, cols) and int64 targets (rows,)."""
    x = make_logits(generator, rows, cols)
    t = make_targets(generator, rows, cols, ignored=ignored, ignore_index=ignore_index)
    return x, t


def large_logits(generator: torch.Generator, rows: int, cols: int) -> tuple[torch.Tensor, int]:
    """Logits (rows, cols) in fp64 at +-LARGE_LOGIT (1e4), a pattern per row (cycling):

    0. every logit 1e4 + N(0, 2^2): exp(x) overflows fp32 without the max;
    1. every logit -1e4 + N(0, 2^2): exp(x) underflows to 0 without the max (0/0);
    2. N(0, 1) with one logit at 1e4 (returned as ``hot``, the column): p is one-hot;
    3. columns alternating 1e4 + N(0, 1) and -1e4 + N(0, 1).

    Returns:
        (x, hot): the logits and the column of pattern 2's single large logit.
    """
    noise = torch.randn(rows, cols, generator=generator, dtype=torch.float64)
    hot = int(torch.randint(0, cols, (1,), generator=generator))
    x = torch.empty(rows, cols, dtype=torch.float64)
    signs = torch.where(torch.arange(cols) % 2 == 0, 1.0, -1.0).to(torch.float64)
    for row in range(rows):
        pattern = row % 4
        if pattern == 0:
            x[row] = LARGE_LOGIT + 2.0 * noise[row]
        elif pattern == 1:
            x[row] = -LARGE_LOGIT + 2.0 * noise[row]
        elif pattern == 2:
            x[row] = noise[row]
            x[row, hot] = LARGE_LOGIT
        else:
            x[row] = signs * LARGE_LOGIT + noise[row]
    return x, hot
