"""The half-precision tolerance is the arithmetic the assignment allows, no stricter and no looser.

The assignment allows: products y*g formed in fp32 or rounded to the input dtype, an fp32 row
sum, one rounding of the result (spec.py, docs/checks.md). Here every value call of a real
plan (seed 0 and 1, CPU sizes) is computed, in the parent's process with plain PyTorch, the
ways that arithmetic allows, and must pass its check's tolerance:

- the seed's explicit fp32 expression (the benchmark baseline);
- torch.ops.aten._softmax_backward_data on CPU tensors (PyTorch's own kernel there);
- PyTorch's CUDA kernel's order, simulated: p = y*g rounded to the input dtype, s = fp32 sum of
  p, dx = p - y*s rounded once (PersistentSoftmax.cuh / SoftMax.cu: gradInput = grad*output -
  output*sum), with and without a fused multiply-add.

And the arithmetic it does not allow must fail half_precision with a message naming it: a dot
accumulated in half precision (a running total, or vector lanes) and g - dot in half
precision. tests/grader/test_gpu.py runs aten's kernel itself on the GPU.
"""

from __future__ import annotations

import pytest
import torch

from grader.assignments.softmax_backward.checks import build_plan
from grader.assignments.softmax_backward.inputs import exact_case
from grader.assignments.softmax_backward.oracle import product_rounding_slack
from grader.assignments.softmax_backward.spec import TOLERANCES
from grader.checks.plan import CallEvidence, CheckEvidence, PlannedCheck
from grader.checks.tolerance import Tolerance, compare
from grader.harness.protocol import CallReport, TensorSpec

HALF = (torch.float16, torch.bfloat16)


@pytest.fixture(scope="module", params=[0, 1], ids=["seed0", "seed1"])
def plan(request):
    return build_plan(seed=request.param, device="cpu")


def _value_calls(plan):
    """(check name, call, y, g) for every call with an oracle and tensor inputs (first round)."""
    for planned in plan.checks:
        for call in planned.calls:
            if call.expected and call.expect == "output" and all(isinstance(a, TensorSpec) for a in call.args[:2]):
                yield planned.name, call, plan.bank.values_of(call.args[0]), plan.bank.values_of(call.args[1])


# ---- what the assignment allows ---------------------------------------------------------------
def seed_fp32_expression(y, g):
    """The assignment's baseline: upcast, reduce the fp32 product once, round the result once."""
    y32, g32 = y.float(), g.float()
    return (y32 * (g32 - (y32 * g32).sum(-1, keepdim=True))).to(y.dtype)


def aten_cpu(y, g):
    return torch.ops.aten._softmax_backward_data(g, y, -1, y.dtype)


def aten_cuda_order(y, g):
    """PyTorch's CUDA softmax backward, step by step: p = grad*output in the input dtype (one
    rounding of the exact product), an fp32 sum of p, then p - output*sum in fp32, stored in
    the input dtype."""
    p = y * g  # CPU half/bfloat16 ops round the exact product to the dtype, as c10::Half's operator* does
    s = p.float().sum(-1, keepdim=True)
    return (p.float() - y.float() * s).to(y.dtype)


def aten_cuda_order_fma(y, g):
    """The same with p - output*sum fused into one rounding to fp32 (what nvcc emits)."""
    p = y * g
    s = p.float().sum(-1, keepdim=True)
    return (p.double() - y.double() * s.double()).float().to(y.dtype)


ALLOWED = {
    "seed fp32 expression": seed_fp32_expression,
    "aten on CPU": aten_cpu,
    "aten CUDA order": aten_cuda_order,
    "aten CUDA order, fused multiply-add": aten_cuda_order_fma,
}


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_allowed_arithmetic_passes_every_value_call_in_every_dtype(name, plan):
    compute = ALLOWED[name]
    seen_dtypes = set()
    for check_name, call, y, g in _value_calls(plan):
        got = compute(y, g)
        result = compare(got, call.expected[0], call.scale[0], call.tolerance, call.slack_of(0))
        assert result.passed, f"{name} fails {check_name} {call.label}: {result.describe()}"
        seen_dtypes.add(y.dtype)
    assert seen_dtypes == {torch.float32, torch.float16, torch.bfloat16}


def test_the_cuda_order_really_rounds_the_products():
    # Without the slack, PyTorch's CUDA arithmetic fails the fp32-only bound by the factors the
    # H200 showed (fp16 2-5x, bf16 20-50x): the slack is what lets it pass, not a looser rtol.
    plan = build_plan(seed=0, device="cpu")
    worst = {}
    for _, call, y, g in _value_calls(plan):
        if y.dtype in HALF and "exact" not in call.id:
            ratio = compare(aten_cuda_order(y, g), call.expected[0], call.scale[0], call.tolerance).max_ratio
            worst[y.dtype] = max(worst.get(y.dtype, 0.0), ratio)
    assert 1.5 < worst[torch.float16] < 20, worst
    assert 10 < worst[torch.bfloat16] < 200, worst


# ---- what it does not allow -------------------------------------------------------------------
def running_total_in_dtype(y, g, chunk: int = 128):
    """A dot accumulated chunk by chunk into a running total of the input dtype."""
    y32, g32 = y.float(), g.float()
    total = torch.zeros(y.shape[0], 1, dtype=y.dtype)
    for start in range(0, y.shape[1], chunk):
        total = total + (y32[:, start:start + chunk] * g32[:, start:start + chunk]).sum(-1, keepdim=True).to(y.dtype)
    return (y32 * (g32 - total.float())).to(y.dtype)


def lanes_in_dtype(y, g, lanes: int = 1024):
    """A dot accumulated in `lanes` vector lanes of the input dtype, then reduced in fp32."""
    y32, g32 = y.float(), g.float()
    acc = torch.zeros(y.shape[0], lanes, dtype=y.dtype)
    for start in range(0, y.shape[1], lanes):
        products = (y32[:, start:start + lanes] * g32[:, start:start + lanes]).to(y.dtype)
        acc = acc + torch.nn.functional.pad(products, (0, lanes - products.shape[1]))
    return (y32 * (g32 - acc.float().sum(-1, keepdim=True))).to(y.dtype)


def subtraction_in_dtype(y, g):
    """dot in fp32, then dot rounded to the input dtype and y*(g - dot) in that dtype."""
    dot = (y.float() * g.float()).sum(-1, keepdim=True)
    return y * (g - dot.to(y.dtype))


NOT_ALLOWED = {
    "running total": (running_total_in_dtype, "the row sum accumulated in {name}"),
    "lanes": (lanes_in_dtype, "the row sum accumulated in {name}"),
    "g - dot": (subtraction_in_dtype, "dot rounded to {name} before the subtraction"),
}


def _half_precision_check(plan, dtype) -> PlannedCheck:
    planned = next(c for c in plan.checks if c.name == "half_precision")
    calls = [call for call in planned.calls if call.out_dtype == dtype]
    return PlannedCheck(planned.name, calls, planned.evaluate)


def _evaluate(plan, check: PlannedCheck, compute) -> tuple:
    calls = {}
    for call in check.calls:
        y, g = plan.bank.values_of(call.args[0]), plan.bank.values_of(call.args[1])
        calls[call.id] = CallEvidence(report=CallReport(id=call.id, status="ok"), out=compute(y, g))
    return check.evaluate(check, CheckEvidence(calls=calls, bank=plan.bank)), calls


@pytest.mark.parametrize("dtype", HALF, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(NOT_ALLOWED))
def test_half_precision_arithmetic_fails_with_its_name(name, dtype, plan):
    compute, words = NOT_ALLOWED[name]
    outcome, _ = _evaluate(plan, _half_precision_check(plan, dtype), compute)
    assert not outcome.passed, outcome.message
    assert words.format(name=str(dtype).replace("torch.", "")) in outcome.message.replace("was accumulated", "accumulated"), \
        outcome.message
    assert "Hint:" not in outcome.message and "too few programs" not in outcome.message, outcome.message


def test_lanes_holding_one_product_each_are_the_allowed_arithmetic(plan):
    # With at most 1024 columns, 1024 half-precision lanes each hold one product rounded to the
    # input dtype, summed in fp32: exactly what PyTorch's CUDA kernel does. Such rows pass.
    seen = 0
    for _, call, y, g in _value_calls(plan):
        if y.dtype in HALF and y.shape[1] <= 1024:
            result = compare(lanes_in_dtype(y, g), call.expected[0], call.scale[0], call.tolerance, call.slack_of(0))
            assert result.passed, (call.label, result.describe())
            seen += 1
    assert seen >= 3


@pytest.mark.parametrize("dtype", HALF, ids=["float16", "bfloat16"])
def test_not_allowed_errors_are_far_outside_on_the_exact_rows(dtype, plan):
    # The exact rows (inputs.exact_case) carry the separation: there the allowed arithmetic is
    # exact up to its final rounding, and each forbidden one is off by several times the bound.
    check = _half_precision_check(plan, dtype)
    exact_calls = [call for call in check.calls if "/exact/" in call.id]
    assert len(exact_calls) == 2
    for name, (compute, _) in NOT_ALLOWED.items():
        worst = 0.0
        for call in exact_calls:
            y, g = plan.bank.values_of(call.args[0]), plan.bank.values_of(call.args[1])
            worst = max(worst, compare(compute(y, g), call.expected[0], call.scale[0], call.tolerance,
                                       call.slack_of(0)).max_ratio)
        assert worst > 1.3, (name, dtype, worst)
    for name, compute in ALLOWED.items():
        for call in exact_calls:
            y, g = plan.bank.values_of(call.args[0]), plan.bank.values_of(call.args[1])
            assert compare(compute(y, g), call.expected[0], call.scale[0], call.tolerance,
                           call.slack_of(0)).max_ratio <= 0.5, (name, dtype, call.label)


def test_a_worst_case_product_bound_would_let_g_minus_dot_in_half_precision_pass(plan):
    # Why the slack is computed from the inputs: adding the unit roundoff u to rtol (u x scale
    # bounds the product rounding for any input) lets half-precision subtraction pass.
    for dtype, unit_roundoff in ((torch.float16, 2.0**-11), (torch.bfloat16, 2.0**-8)):
        base = TOLERANCES[dtype]
        loose = Tolerance(rtol=base.rtol + unit_roundoff, atol=base.atol, vtol=base.vtol, why="worst case")
        for call in _half_precision_check(plan, dtype).calls:
            y, g = plan.bank.values_of(call.args[0]), plan.bank.values_of(call.args[1])
            assert compare(subtraction_in_dtype(y, g), call.expected[0], call.scale[0], loose).passed, call.label


@pytest.mark.parametrize("dtype", HALF, ids=["float16", "bfloat16"])
def test_exact_case_products_are_exact_so_the_slack_is_zero(dtype):
    y, g = exact_case(torch.Generator().manual_seed(3), 4, 4096)
    y, g = y.to(dtype), g.to(dtype)
    assert float(product_rounding_slack(y, g).max()) == 0.0
    assert abs(float(y.double().sum(-1).mean()) - 1.0) < 1e-3  # still (nearly) probabilities


def test_slack_is_the_exact_effect_of_rounding_the_products():
    generator = torch.Generator().manual_seed(5)
    y = torch.softmax(torch.randn(3, 300, generator=generator, dtype=torch.float64), -1).to(torch.bfloat16)
    g = torch.randn(3, 300, generator=generator, dtype=torch.float64).to(torch.bfloat16)
    rounding = (y.double() * g.double()).to(torch.bfloat16).double() - y.double() * g.double()
    expected = rounding.abs() + y.double().abs() * rounding.sum(-1, keepdim=True).abs()
    assert torch.equal(product_rounding_slack(y, g), expected)
    assert float(expected.max()) > 0
