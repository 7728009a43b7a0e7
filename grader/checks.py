"""Building blocks shared by assignments: tolerances and scale-aware comparison.

A check's verdict is decided here, in the trusted parent, from tensors it read back from the
child as plain numbers. Nothing the submission printed or returned as metadata can pass a
comparison.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Tolerance:
    """Per-element tolerance ``|got - expected| <= atol + rtol * scale + vtol * |expected|``.

    ``scale`` is chosen by the assignment from the terms that form each output element (for
    the softmax VJP: |y| * (|g| + |dot| + sum|y*g|)), so the arithmetic part of the bound
    follows the row's own magnitude: an all-zero answer cannot pass on long rows, where every
    element is O(1/N). ``vtol`` covers rounding the result to a narrow output dtype, which is
    relative to the value itself, not to the terms that made it; keeping it out of ``rtol``
    keeps a low-precision dot (whose error scales with the terms) visible.

    Attributes:
        rtol: relative to ``scale`` (error of fp32 arithmetic on the given inputs).
        atol: absolute floor, in output units; well below any magnitude the checks produce.
        why: where the numbers come from (stored with a failing check's result).
        vtol: relative to |expected| (rounding of the stored result), default 0.
        summary: the reason in a few words, for the one-line failure message.
    """

    rtol: float
    atol: float
    why: str
    vtol: float = 0.0
    summary: str = ""

    def allowed(self, expected: torch.Tensor, scale: torch.Tensor, slack: torch.Tensor | None = None) -> torch.Tensor:
        """The allowed absolute error per element (fp64 tensors of one shape).

        ``slack`` (optional, same shape, >= 0): error that arithmetic the assignment allows
        makes beyond fp32 rounding, computed exactly from the inputs (for the softmax VJP:
        products rounded to the input dtype, oracle.product_rounding_slack). It is added as it
        is, and the rounding of the stored result (``vtol``) applies to the value that
        arithmetic produced, which lies within ``slack`` of ``expected``.
        """
        if slack is None:
            return self.atol + self.rtol * scale + self.vtol * expected.abs()
        return self.atol + self.rtol * scale + self.vtol * (expected.abs() + slack) + slack

    def bound(self) -> str:
        value_part = f" + {self.vtol:.3g} x |expected|" if self.vtol else ""
        return f"{self.atol:.3g} + {self.rtol:.3g} x scale{value_part}"

    def describe(self) -> str:
        """The bound with its full reason (stored in the result as ``tolerance``)."""
        return f"{self.bound()} ({self.why})"

    def describe_short(self) -> str:
        """The bound with a few-word reason, for failure messages (docs/checks.md has the rest)."""
        return f"{self.bound()} ({self.summary or self.why}; see docs/checks.md)"


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
