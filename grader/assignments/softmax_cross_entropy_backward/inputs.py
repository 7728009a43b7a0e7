"""Seeded inputs of ``softmax_cross_entropy_backward``'s checks: logits with varied spread and
offset, targets that hit the first and last class, ignored rows, and logits at +-1e4.

Every value comes from the plan's one torch.Generator; everything is float64 (logits) or int64
(targets) here, and the checks round the logits to the dtype under test.
"""

from __future__ import annotations

import torch

from grader.assignments.protocol import Case
from grader.assignments.softmax_cross_entropy_backward.oracle import DEFAULT_IGNORE_INDEX, count_valid

#: Logit magnitude of stability_large_logits: exp(1e4) overflows fp32 (max 3.4e38 = e^88.7),
#: exp(-1e4) underflows to 0; both are exact in fp16 and bf16 too (fp16 max 65504).
LARGE_LOGIT = 1e4

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


def _grad(value: float) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.float64)


def make_case(generator: torch.Generator, dims, exact: bool = False) -> Case:
    """The default case of (M, C): ``random_case`` with every third row ignored, grad 1."""
    m, c = dims["M"], dims["C"]
    x, t = random_case(generator, m, c, ignored=every_third_row(m))
    return Case(values={"x": x, "t": t, "grad": _grad(1.0)})


def case_of(x: torch.Tensor, t: torch.Tensor, grad: float, *, ignore_index: int | None = None,
            dtype: str = "float32") -> Case:
    """A case of these values; ``ignore_index`` is passed as a keyword when given (else the
    default -100 applies). Its label says what the draw knows: the shape, dtype, grad, n_valid."""
    values: dict = {"x": x, "t": t, "grad": _grad(grad)}
    effective = DEFAULT_IGNORE_INDEX if ignore_index is None else ignore_index
    label = f"({x.shape[0]}, {x.shape[1]}) {dtype}, grad {grad:g}, n_valid {count_valid(t, effective)}"
    if ignore_index is not None:
        values["ignore_index"] = ignore_index
        label += f", ignore_index={ignore_index}"
    return Case(values=values, label=label)


def drawn(m: int, c: int, *, grad: float = 1.0, ignored=None, ignore_index: int | None = None,
          dtype: str = "float32"):
    """``draw(generator) -> Case`` of ``random_case`` (M, C) with ``ignored`` rows (default
    every third row), the given grad and ignore_index."""
    rows = every_third_row(m) if ignored is None else ignored

    def draw(generator: torch.Generator) -> Case:
        x, t = random_case(generator, m, c, ignored=rows,
                           ignore_index=DEFAULT_IGNORE_INDEX if ignore_index is None else ignore_index)
        return case_of(x, t, grad, ignore_index=ignore_index, dtype=dtype)

    return draw


def replay_case(generator: torch.Generator, case: Case) -> Case:
    """New (x, t, grad) for replaying a call's Triton launches: fresh logits and classes, one
    ignored row more (or fewer) than the call had, so n_valid changes wherever it can (M > 1),
    and a grad of the other sign, so launches that do not count the targets or read grad
    themselves do not reproduce the output. ignore_index stays the call's."""
    t, grad = case.values["t"], float(case.values["grad"])
    ignore_index = int(case.values.get("ignore_index", DEFAULT_IGNORE_INDEX))
    rows, cols = case.values["x"].shape
    ignored_before = int((t == ignore_index).sum())
    ignored_now = ignored_before + 1 if ignored_before + 1 < rows else max(ignored_before - 1, 0)
    ignored = tuple(int(r) for r in torch.randperm(rows, generator=generator)[:ignored_now])
    x = make_logits(generator, rows, cols)
    t_new = make_targets(generator, rows, cols, ignored=ignored, ignore_index=ignore_index)
    if rows > 1 and count_valid(t_new, ignore_index) == count_valid(t, ignore_index):
        # ignore_index is a class that the new targets hit: change one row back or forth
        valid_rows = torch.nonzero(t_new != ignore_index).flatten()
        if len(valid_rows) > 1:
            t_new[int(valid_rows[0])] = ignore_index
        else:
            t_new[int(torch.nonzero(t_new == ignore_index).flatten()[0])] = 0 if ignore_index != 0 else 1
    magnitude = float(torch.empty((), dtype=torch.float64).uniform_(0.5, 2.0, generator=generator))
    values = {"x": x, "t": t_new, "grad": _grad(-magnitude if grad > 0 else magnitude)}
    if "ignore_index" in case.values:
        values["ignore_index"] = ignore_index
    return Case(values=values)
