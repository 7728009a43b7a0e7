"""The poison in an output, as the parent reads it: memory the submission never wrote.

The check child fills the memory a submission allocates with ``POISON_BYTE`` in every byte
(grader/harness/poison.py), and the replay fills a recording's output and scratch buffers
alike; in a float dtype that is NaN with every bit set. On a CPU, NaN arithmetic keeps the first
NaN operand's payload, so an output element of all-one bits was never written, or was
accumulated into memory that was never written (on a GPU only the first: its arithmetic makes
a canonical NaN of any NaN). The NaN guards around the inputs (0x7FC00000) and a NaN the CPU
computes (0xFFC00000) are other bit patterns.
"""

from __future__ import annotations

import torch

from grader.harness.poison import POISON_BYTE

_INT_VIEW = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def poisoned(out: torch.Tensor) -> torch.Tensor:
    """Boolean mask of the elements of ``out`` (a float tensor) whose every byte is the poison;
    all False for other dtypes."""
    if not out.dtype.is_floating_point or out.element_size() not in _INT_VIEW:
        return torch.zeros(out.shape, dtype=torch.bool)
    all_ones = -1 if POISON_BYTE == 0xFF else int.from_bytes(bytes([POISON_BYTE]) * out.element_size(), "little",
                                                               signed=True)
    return out.contiguous().view(_INT_VIEW[out.element_size()]) == all_ones


def _uncovered_block(mask: torch.Tensor) -> tuple[str, int, str] | None:
    """(what, first index, advice) when the poisoned elements of a 2-D output are a tail block
    (every column, or row, from some index on holds poison and none before it, two at least):
    outputs a grid, loop or mask never reached; else None."""
    if mask.dim() != 2:
        return None
    for axis, what, advice in ((0, "column", "a grid, loop bound or mask that stops short of the row's end"),
                               (1, "row", "a grid that launches too few programs for all rows")):
        per_index = mask.any(dim=axis)
        if per_index.numel() < 2 or bool(per_index.all()) or not bool(per_index.any()):
            continue
        first = int(torch.nonzero(per_index)[0])
        if 0 < first <= per_index.numel() - 2 and bool(per_index[first:].all()):
            return what, first, advice
    return None


def diagnose_unwritten(out: torch.Tensor) -> str:
    """A sentence when some output elements hold the poison, else "": where they form a block
    a grid, loop or mask did not reach, that block ("left unwritten"); otherwise memory that
    was accumulated into or returned without ever being written (a scratch buffer never
    zeroed, say)."""
    mask = poisoned(out)
    count = int(mask.sum())
    if not count:
        return ""
    block = _uncovered_block(mask)
    if block is not None:
        what, first, advice = block
        return (f" {count} outputs hold the poison the grader puts in memory a submission allocates: the kernel left"
                f" those outputs unwritten, every {what} from {what} {first} on. Look for {advice}.")
    first_at = [int(i) for i in torch.nonzero(mask)[0]]
    return (f" {count} outputs (the first at {first_at}) hold the grader's poison, the value it puts in memory a"
            f" submission allocates: the kernel accumulated into or returned memory that was never written"
            f" (torch.empty has no defined values: zero an accumulator with torch.zeros, or write every"
            f" element before it is read or returned).")
