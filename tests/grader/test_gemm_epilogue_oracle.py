"""gemm_epilogue's maths on the CPU, without Triton: the GELU bounds its tolerance relies on, the
exact inputs, and the arithmetic the tolerance allows passing while the mistakes it names fail."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from grader.assignments.gemm_epilogue import placed_oracle, spec
from grader.assignments.gemm_epilogue.inputs import make_case
from grader.assignments.gemm_epilogue.oracle import (
    GELU_SECOND_DERIVATIVE_MAX,
    gelu_tanh,
    gelu_tanh_derivative,
)
from grader.checks.tolerance import compare


def _rounded(case, dtype=torch.float16):
    return {name: value.to(dtype) for name, value in case.values.items()}


def _compare(out, values, dtype_name="float16"):
    found = placed_oracle(values)["out"]
    return compare(out, found.expected, found.scale, spec.TOLERANCES[dtype_name], found.slack)


def test_gelu_is_torchs_tanh_form_and_its_derivative_bounds_hold():
    z = torch.linspace(-30, 30, 600_001, dtype=torch.float64, requires_grad=True)
    value = gelu_tanh(z)
    assert torch.allclose(value, F.gelu(z, approximate="tanh"), rtol=0, atol=1e-15)
    (first,) = torch.autograd.grad(value.sum(), z, create_graph=True)
    (second,) = torch.autograd.grad(first.sum(), z)
    assert torch.allclose(gelu_tanh_derivative(z.detach()), first.detach(), rtol=0, atol=1e-12)
    assert float(second.abs().max()) <= GELU_SECOND_DERIVATIVE_MAX
    assert float(second.abs().max()) > 0.79  # the bound is tight (sqrt(2/pi) at 0)


def test_exact_case_partial_sums_are_exact_in_fp32_and_large():
    case = make_case(torch.Generator().manual_seed(0), {"M": 16, "N": 24, "K": spec.ACCUMULATION_K}, True)
    a, b = case.values["a"], case.values["b"]
    assert torch.equal(a.to(torch.float16).double(), a) and torch.equal(a.to(torch.bfloat16).double(), a)
    products = a.unsqueeze(2) * b.unsqueeze(0)  # (M, K, N)
    running = products.cumsum(dim=1)
    assert torch.equal(products.float().cumsum(dim=1).double(), running)
    assert float(running.abs().amax(dim=1).min()) > 10 * float((a @ b).abs().max())  # partial sums >> result


@pytest.mark.parametrize("exact", [False, True])
def test_allowed_arithmetic_passes(exact):
    case = make_case(torch.Generator().manual_seed(1), {"M": 33, "N": 40, "K": spec.ACCUMULATION_K if exact else 100},
                     exact)
    v = _rounded(case)
    a32, b32, bias32 = (t.float() for t in (v["a"], v["b"], v["bias"]))
    fused = F.gelu(a32 @ b32 + bias32, approximate="tanh").to(torch.float16)
    unfused = F.gelu((a32 @ b32).half().float() + bias32, approximate="tanh").half()  # the baseline's roundings
    unfused_twice = F.gelu(((a32 @ b32).half().float() + bias32).half().float(), approximate="tanh").half()
    for out in (fused, unfused, unfused_twice):
        result = _compare(out, v)
        assert result.passed, result.describe()


def test_the_erf_gelu_and_an_fp16_accumulator_fail():
    v = _rounded(make_case(torch.Generator().manual_seed(2), {"M": 33, "N": 40, "K": 100}, False))
    erf = F.gelu(v["a"].float() @ v["b"].float() + v["bias"].float()).half()
    assert not _compare(erf, v).passed
    v = _rounded(make_case(torch.Generator().manual_seed(3), {"M": 16, "N": 24, "K": spec.ACCUMULATION_K}, True))
    acc = torch.zeros(16, 24, dtype=torch.float16)
    for start in range(0, spec.ACCUMULATION_K, 128):  # fp32 dot per block, running sum in fp16
        acc = (acc.float() + v["a"][:, start:start + 128].float() @ v["b"][start:start + 128].float()).half()
    result = _compare(F.gelu(acc.float() + v["bias"].float(), approximate="tanh").half(), v)
    assert not result.passed and result.max_ratio > 3


def test_an_output_just_beyond_the_bound_fails():
    v = _rounded(make_case(torch.Generator().manual_seed(4), {"M": 8, "N": 16, "K": 32}, False))
    found = placed_oracle(v)["out"]
    allowed = spec.TOLERANCES["float16"].allowed(found.expected, found.scale, found.slack)
    inside = compare(found.expected + 0.99 * allowed, found.expected, found.scale, spec.TOLERANCES["float16"], found.slack)
    beyond = compare(found.expected + 1.01 * allowed, found.expected, found.scale, spec.TOLERANCES["float16"], found.slack)
    assert inside.passed and not beyond.passed and math.isclose(beyond.max_ratio, 1.01, rel_tol=1e-6)
