"""Building blocks shared by assignments: scale-aware comparison under a ``Tolerance``.

``Tolerance`` is defined once in grader/harness/protocol.py (the replay timer applies the same
rule to timed outputs) and re-exported here.

A check's verdict is decided here, in the trusted parent, from tensors it read back from the
child as plain numbers. Nothing the submission printed or returned as metadata can pass a
comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from grader.harness.protocol import Tolerance

__all__ = ["Comparison", "Tolerance", "compare"]


@dataclass
class Comparison:
    """Outcome of comparing one output tensor with its oracle.

    Attributes:
        passed: every element within tolerance.
        bad_count: elements outside tolerance (NaN/inf outputs included).
        total: elements compared.
        max_abs_err: largest |got - expected| over the finite outputs (inf when none is finite).
        max_ratio: worst |err| / allowed; inf when an output is NaN or inf.
        worst_index, got_at_worst, expected_at_worst, allowed_at_worst: the worst element (a
            NaN/inf output when there is one).
        nan_count: outputs that are NaN or inf.
        max_finite_ratio: worst |err| / allowed over the finite outputs only (0 when none is
            finite), so that a few NaNs do not hide how far off the rest is.
        finite_worst_index: where that is, or None.
    """

    passed: bool
    bad_count: int
    total: int
    max_abs_err: float
    max_ratio: float  # worst |err| / allowed, > 1 means outside tolerance
    worst_index: tuple[int, ...] | None
    got_at_worst: float | None
    expected_at_worst: float | None
    allowed_at_worst: float | None
    nan_count: int
    max_finite_ratio: float = 0.0
    finite_worst_index: tuple[int, ...] | None = None

    def describe(self) -> str:
        if self.passed:
            return f"max |err| {self.max_abs_err:.3g} ({self.max_ratio:.2g} of tolerance)"
        where = ",".join(str(i) for i in self.worst_index) if self.worst_index is not None else "?"
        text = f"{self.bad_count} of {self.total} elements outside tolerance"
        if self.nan_count:
            text += f" ({self.nan_count} NaN/inf)"
        text += (
            f"; worst at [{where}]: got {self.got_at_worst:.6g}, expected {self.expected_at_worst:.6g}"
            f" (|err| {abs(self.got_at_worst - self.expected_at_worst):.3g} > allowed {self.allowed_at_worst:.3g})"
        )
        if self.nan_count and self.nan_count < self.total:
            finite_where = ",".join(str(i) for i in self.finite_worst_index or ())
            text += f"; worst finite output {self.max_finite_ratio:.3g}x the allowed error at [{finite_where}]"
        return text


def compare(got: torch.Tensor, expected: torch.Tensor, scale: torch.Tensor, tolerance: Tolerance,
            slack: torch.Tensor | None = None) -> Comparison:
    """Compare ``got`` with the fp64 oracle element by element, NaN never passing.

    Args:
        got: output read back from the child, any float dtype, shape (M, N).
        expected: fp64 oracle, shape (M, N).
        scale: fp64, shape (M, N), non-negative magnitudes the error bound scales with.
        tolerance: atol/rtol/vtol.
        slack: fp64, shape (M, N) or None: extra allowed error of the arithmetic the
            assignment allows (Tolerance.allowed).

    Returns:
        Comparison with count, worst index, got vs expected at the worst element.

    Raises:
        ValueError: shapes differ (callers check shape first and report it).
    """
    if got.shape != expected.shape:
        raise ValueError(f"shape {tuple(got.shape)} != expected {tuple(expected.shape)}")
    got64 = got.detach().to(torch.float64)
    err = (got64 - expected).abs()
    allowed = tolerance.allowed(expected, scale, slack)
    finite = torch.isfinite(got64)
    err = torch.where(finite, err, torch.full_like(err, float("inf")))
    ratio = err / allowed
    bad = ~(err <= allowed)
    total = got64.numel()
    bad_count = int(bad.sum())
    nan_count = int((~finite).sum())
    if total == 0:
        return Comparison(True, 0, 0, 0.0, 0.0, None, None, None, None, 0)
    flat_worst = int(torch.argmax(torch.where(torch.isnan(ratio), torch.full_like(ratio, float("inf")), ratio)))
    worst_index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat_worst), got64.shape))
    max_abs = float(err[finite].max()) if bool(finite.any()) else float("inf")
    finite_ratio = torch.where(finite & ~torch.isnan(ratio), ratio, torch.full_like(ratio, -1.0))
    flat_finite_worst = int(torch.argmax(finite_ratio))
    max_finite = max(float(finite_ratio.reshape(-1)[flat_finite_worst]), 0.0)
    finite_worst_index = (tuple(int(i) for i in torch.unravel_index(torch.tensor(flat_finite_worst), got64.shape))
                          if bool(finite.any()) else None)
    return Comparison(
        passed=bad_count == 0,
        bad_count=bad_count,
        total=total,
        max_abs_err=max_abs,
        max_ratio=float(ratio.reshape(-1)[flat_worst]),
        worst_index=worst_index,
        got_at_worst=float(got64.reshape(-1)[flat_worst]),
        expected_at_worst=float(expected.reshape(-1)[flat_worst]),
        allowed_at_worst=float(allowed.reshape(-1)[flat_worst]),
        nan_count=nan_count,
        max_finite_ratio=max_finite,
        finite_worst_index=finite_worst_index,
    )
