"""Unit tests of grader/checks/tolerance.py (compare, Tolerance), the result contract's check outcome and
the softmax_backward oracles (vjp_fp64, autograd_vjp_fp64, central_difference_fp64) on hand-checkable numbers.

No child process and no Triton here: these run in milliseconds.
"""

from __future__ import annotations

import math

import pytest
import torch

from grader.assignments.softmax_backward.inputs import make_logits, make_upstream
from grader.assignments.softmax_backward.oracle import autograd_vjp_fp64, central_difference_fp64, vjp_fp64
from grader.assignments.softmax_backward.spec import CENTRAL_DIFFERENCE_ATOL, LONG_ROW, TOLERANCES
from grader.checks.tolerance import Tolerance, compare
from grader.report.document import CheckOutcome

F64 = torch.float64
FP32 = TOLERANCES[torch.float32]
FP16 = TOLERANCES[torch.float16]
BF16 = TOLERANCES[torch.bfloat16]


def _t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


def _long_rows(seed: int, rows: int = 4, cols: int = LONG_ROW):
    """(x, y, g) like the grader's: row spreads 1, 6, 0.1, 25 and g row means 0, 3, -1.5, 0.5."""
    generator = torch.Generator().manual_seed(seed)
    x = make_logits(generator, rows, cols)
    g = make_upstream(generator, rows, cols)
    return x, torch.softmax(x, dim=-1), g


# ---- oracles on hand-checkable numbers -------------------------------------------------------
def test_two_element_example_from_the_assignment():
    y, g = _t([[0.25, 0.75]]), _t([[2.0, -1.0]])
    dx, scale = vjp_fp64(y, g)
    assert float((y * g).sum()) == -0.25  # dot = 0.5 - 0.75
    assert dx.tolist() == [[0.5625, -0.5625]]  # exact: [0.25 * 2.25, 0.75 * (-0.75)]
    assert float(dx.sum()) == 0.0  # softmax is shift-invariant
    assert bool((scale > 0).all())


def test_dense_jacobian_times_g_equals_the_vjp():
    p = torch.tensor([0.7, 0.2, 0.1], dtype=F64)
    jacobian = torch.diag(p) - torch.outer(p, p)  # dy_i/dx_j = p_i (delta_ij - p_j)
    autograd_jacobian = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, -1), p.log())
    assert torch.allclose(autograd_jacobian, jacobian, rtol=0, atol=1e-15)
    generator = torch.Generator().manual_seed(0)
    for g in (torch.tensor([1.0, 0.0, 0.0], dtype=F64), torch.tensor([0.3, -2.0, 5.0], dtype=F64),
              torch.randn(3, generator=generator, dtype=F64)):
        expected = jacobian.T @ g
        dx, _ = vjp_fp64(p[None], g[None])
        assert torch.allclose(dx[0], expected, rtol=0, atol=1e-15), (dx, expected)
        assert torch.allclose(autograd_vjp_fp64(p.log()[None], g[None])[0], expected, rtol=0, atol=1e-15)


def test_softmax_cross_entropy_gradient_is_p_minus_y():
    p = _t([[0.25, 0.60, 0.15]])
    y = _t([[0.0, 1.0, 0.0]])
    g = torch.where(y > 0, -y / p, torch.zeros_like(p))  # dL/dp of L = -sum(y log p)
    dx, _ = vjp_fp64(p, g)
    assert math.isclose(float(dx[0, 1]), -0.40, rel_tol=0, abs_tol=1e-15)
    assert torch.allclose(dx, p - y, rtol=0, atol=1e-15)


def test_autograd_oracle_agrees_with_the_formula_on_adversarial_rows():
    x, y, g = _long_rows(seed=1, rows=8, cols=1000)
    formula, scale = vjp_fp64(y, g)
    autograd = autograd_vjp_fp64(x, g)
    assert bool(((autograd - formula).abs() <= 1e-12 * scale + 1e-300).all())


def test_central_difference_agrees_with_autograd():
    generator = torch.Generator().manual_seed(2)
    x = make_logits(generator, 3, 37)
    g = make_upstream(generator, 3, 37)
    autograd = autograd_vjp_fp64(x, g)
    for row, col in [(0, 0), (1, 5), (2, 36), (1, 17)]:
        slope = central_difference_fp64(x, g, row, col, 1e-5)
        assert abs(slope - float(autograd[row, col])) <= CENTRAL_DIFFERENCE_ATOL, (row, col)


def test_oracle_upcasts_the_rounded_input_it_was_given():
    _, y, g = _long_rows(seed=3, rows=2, cols=257)
    y16, g16 = y.half(), g.half()
    dx16, _ = vjp_fp64(y16, g16)
    dx_rounded, _ = vjp_fp64(y16.double(), g16.double())
    assert dx16.dtype == F64 and torch.equal(dx16, dx_rounded)


# ---- compare -----------------------------------------------------------------------------------
def test_exact_answer_passes():
    expected = _t([[0.5625, -0.5625]])
    result = compare(expected.float(), expected, torch.ones_like(expected), FP32)
    assert result.passed and result.bad_count == 0 and result.max_abs_err == 0.0 and result.nan_count == 0


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nan_or_inf_in_the_output_never_passes(bad):
    expected = _t([[0.5, -0.5, 0.0]])
    got = expected.clone()
    got[0, 2] = bad
    huge = Tolerance(rtol=1e300, atol=1e300, why="absurdly loose, to show that NaN still fails")
    result = compare(got, expected, torch.ones_like(expected), huge)
    assert not result.passed
    assert result.bad_count == 1 and result.nan_count == 1
    assert result.worst_index == (0, 2)
    assert "NaN/inf" in result.describe()


def test_nan_in_the_oracle_or_the_scale_never_passes():
    expected = _t([[0.5, -0.5]])
    nan_expected = expected.clone()
    nan_expected[0, 0] = float("nan")
    assert not compare(expected, nan_expected, torch.ones_like(expected), FP32).passed
    nan_scale = torch.ones_like(expected)
    nan_scale[0, 1] = float("nan")
    assert not compare(expected, expected, nan_scale, FP32).passed


def test_all_nan_output_never_passes():
    expected = _t([[0.1, 0.2], [0.3, 0.4]])
    got = torch.full_like(expected, float("nan"))
    result = compare(got, expected, torch.ones_like(expected), FP32)
    assert not result.passed and result.bad_count == 4 and result.nan_count == 4


def test_bound_is_atol_plus_rtol_times_scale_inclusive():
    tolerance = Tolerance(rtol=0.5, atol=0.25, why="round numbers")
    expected = _t([[0.0, 0.0]])
    scale = _t([[1.0, 2.0]])  # allowed: 0.75 and 1.25, exactly representable
    assert compare(_t([[0.75, -1.25]]), expected, scale, tolerance).passed
    result = compare(_t([[0.75, -1.2500001]]), expected, scale, tolerance)
    assert not result.passed and result.bad_count == 1 and result.worst_index == (0, 1)


def test_failure_description_shows_count_index_got_and_expected():
    expected = _t([[1.0, 2.0, 3.0, 4.0]])
    got = _t([[1.0, 2.5, 3.0, 5.0]])
    result = compare(got, expected, torch.ones_like(expected), Tolerance(rtol=0.0, atol=0.1, why="test"))
    text = result.describe()
    assert result.bad_count == 2 and result.worst_index == (0, 3)
    for part in ("2 of 4 elements outside tolerance", "worst at [0,3]", "got 5", "expected 4"):
        assert part in text, text


def test_shape_mismatch_raises():
    with pytest.raises(ValueError):
        compare(torch.zeros(2, 3), torch.zeros(3, 2, dtype=F64), torch.ones(3, 2, dtype=F64), FP32)


def test_empty_output_passes_trivially():
    empty = torch.zeros(0, 5, dtype=F64)
    assert compare(empty.float(), empty, empty, FP32).passed


def test_check_outcome_json_carries_its_numbers_and_infinity_as_a_string():
    result = CheckOutcome(name="autograd_fp32", passed=False, message="bad", max_abs_err=1.5,
                          max_err_over_tolerance=float("inf"))
    text = result.model_dump_json()
    assert '"max_abs_err":1.5' in text and '"max_err_over_tolerance":"Infinity"' in text  # strict JSON
    assert CheckOutcome.model_validate_json(text).max_err_over_tolerance == float("inf")
    with pytest.raises(ValueError):
        CheckOutcome(name="x", passed=True, skipped=True, message="a skipped check never passes")


# ---- the tolerance table -----------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_tolerance_has_both_parts_and_a_reason(dtype):
    tolerance = TOLERANCES[dtype]
    assert 0 < tolerance.rtol < 0.05 and 0 < tolerance.atol < 1e-6
    assert len(tolerance.why) > 20
    assert str(tolerance.rtol)[:4] in tolerance.describe() or f"{tolerance.rtol:.3g}" in tolerance.describe()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_fp32_arithmetic_rounded_to_the_dtype_passes_on_long_rows(dtype):
    _, y, g = _long_rows(seed=4)
    y_in, g_in = y.to(dtype), g.to(dtype)
    y32, g32 = y_in.float(), g_in.float()
    got = (y32 * (g32 - (y32 * g32).sum(-1, keepdim=True))).to(dtype)
    expected, scale = vjp_fp64(y_in, g_in)
    result = compare(got, expected, scale, TOLERANCES[dtype])
    assert result.passed, result.describe()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_all_zeros_fail_on_long_rows(dtype):
    _, y, g = _long_rows(seed=5)
    expected, scale = vjp_fp64(y.to(dtype), g.to(dtype))
    result = compare(torch.zeros_like(expected).to(dtype), expected, scale, TOLERANCES[dtype])
    assert not result.passed
    for row in range(expected.shape[0]):  # on every row, not only the peaked ones
        assert not compare(torch.zeros(1, expected.shape[1]), expected[row:row + 1], scale[row:row + 1],
                           TOLERANCES[dtype]).passed, f"zeros pass on row {row}"


def test_a_fixed_atol_would_let_zeros_pass_on_a_near_uniform_long_row():
    """Why the bound scales with each row: dx is O(1/N) on a near-uniform row of N = 65536."""
    _, y, g = _long_rows(seed=6)
    row = slice(2, 3)  # spread 0.1: every y ~ 1/N
    expected, scale = vjp_fp64(y[row], g[row])
    zeros = torch.zeros_like(expected)
    assert compare(zeros, expected, scale, Tolerance(rtol=0.0, atol=1e-4, why="a plausible fixed atol")).passed
    assert not compare(zeros, expected, scale, FP32).passed


@pytest.mark.parametrize("error", ["sum_g", "flipped_sign", "no_dot", "wrong_axis"])
def test_common_mistakes_fail_the_fp32_tolerance(error):
    _, y, g = _long_rows(seed=7, rows=4, cols=1000)
    y, g = y.float().double(), g.float().double()
    dot = (y * g).sum(-1, keepdim=True)
    wrong = {
        "sum_g": y * (g - g.sum(-1, keepdim=True)),
        "flipped_sign": y * (dot - g),
        "no_dot": y * g,
        "wrong_axis": y * (g - (y * g).sum(0, keepdim=True)),
    }[error]
    expected, scale = vjp_fp64(y, g)
    assert not compare(wrong.float(), expected, scale, FP32).passed


def test_fp16_tolerance_catches_a_dot_off_by_one_fp16_ulp():
    _, y, g = _long_rows(seed=8)
    y16, g16 = y.half(), g.half()
    y32, g32 = y16.float(), g16.float()
    dot = (y32 * g32).sum(-1, keepdim=True)
    got = (y32 * (g32 - dot * (1 + 2.0**-10))).half()  # what an fp16 accumulator can give
    expected, scale = vjp_fp64(y16, g16)
    assert not compare(got, expected, scale, FP16).passed
