"""The generic core on any rank and layout (grader/checks/plan.py placement, grader/checks/generic.py,
grader/checks/evaluate.py's coverage diagnosis), on a 4-D toy declared as data: q and v of shape
(B, H, S, D), out[b, h, i] = the mean of v[b, h, j] over the keys j <= i (a causal average; q
only shares its shape). The child is not run: the evidence is made here from the plan, as in
tests/grader/test_generic_checks.py. CPU, milliseconds.
"""

from __future__ import annotations

import pytest
import torch
from test_generic_checks import _evidence, _outcomes

from grader.assignments.protocol import (
    Bounds,
    Case,
    CaseSpec,
    Declared,
    OutputContract,
    OutputOracle,
    RejectsMismatch,
    TensorInput,
    TensorOutput,
    ValueCheck,
)
from grader.checks.evaluate import diagnose_coverage
from grader.checks.generic import build_plan, contract_cases
from grader.checks.plan import LAYOUTS, AssignmentError, InputBank, Layout
from grader.checks.tolerance import Tolerance

TOLERANCES = {"float32": Tolerance(rtol=1e-5, atol=1e-30, why="fp32 sums"),
              "float16": Tolerance(rtol=1e-5, vtol=2.0**-10, atol=2.0**-24, why="fp32 sums, one fp16 rounding")}
BSHD = Layout.permuted(0, 2, 1, 3)  # (B, S, H, D) storage viewed as (B, H, S, D)
DIMS = {"B": 2, "H": 3, "S": 9, "D": 4}


def make_case(generator, dims, exact):
    shape = (dims["B"], dims["H"], dims["S"], dims["D"])
    return Case(values={"q": torch.randn(shape, generator=generator, dtype=torch.float64),
                        "v": torch.randn(shape, generator=generator, dtype=torch.float64)})


def oracle(values):
    v = values["v"].double()
    counts = torch.arange(1, v.shape[-2] + 1, dtype=torch.float64)[:, None]
    return {"out": OutputOracle(v.cumsum(-2) / counts, v.abs().cumsum(-2) / counts)}


def hull(case, placed):
    v = placed["v"].double()
    return torch.cummin(v, dim=-2).values, torch.cummax(v, dim=-2).values


def declared(checks, inputs=None):
    inputs = inputs or (TensorInput("q", ("B", "H", "S", "D"), strided=(BSHD, "transposed", "step")),
                        TensorInput("v", ("B", "H", "S", "D"), strided=(BSHD, "transposed", "step")))
    return Declared(inputs=inputs, outputs=(TensorOutput("out", ("B", "H", "S", "D"), TOLERANCES),),
                    make_case=make_case, oracle=oracle, checks=lambda device: checks,
                    hints={c.name: f"hint of {c.name}" for c in checks},
                    hint_requires={"convex_hull": ("values",)})


CHECKS = (
    ValueCheck("values", (CaseSpec(dims=DIMS),)),
    ValueCheck("strided_inputs", tuple(CaseSpec(dims=DIMS, layouts={"q": layout, "v": layout})
                                       for layout in (BSHD, "transposed", "step", "transposed_step", "offset"))),
    Bounds("convex_hull", (CaseSpec(dims=DIMS), CaseSpec(dims=DIMS, dtype="float16", layouts={"v": BSHD})),
           output="out", bounds=hull, what="lies within the min and max of the rows of v it averages"),
    OutputContract("output_contract", (CaseSpec(dims=DIMS), CaseSpec(dims=DIMS, dtype="float16"))),
    RejectsMismatch("rejects_mismatch", DIMS),
)


def test_layouts_place_any_rank_and_keep_the_2d_strides():
    bank = InputBank()
    values = torch.randn(2, 3, 5, 4, dtype=torch.float64)
    strides = {}
    for layout in [*LAYOUTS, BSHD]:
        spec = bank.view(values, torch.float32, layout)
        assert torch.equal(bank.values_of(spec), values.float()), layout  # the same values, wherever they lie
        strides[str(layout)] = tuple(spec.stride)
    assert strides["contiguous"] == (60, 20, 4, 1) and strides["transposed"] == (60, 20, 1, 5)
    assert strides["permuted(0, 2, 1, 3)"] == (60, 4, 12, 1)  # (B, S, H, D) storage
    assert bank.view(values, torch.float32, "offset").offset > bank.view(values, torch.float32).offset > 0
    matrix = torch.randn(4, 5)
    assert [tuple(bank.view(matrix, torch.float32, name).stride) for name in
            ("contiguous", "transposed", "step", "transposed_step")] == [(5, 1), (1, 4), (17, 3), (2, 9)]
    assert tuple(bank.view(torch.randn(7), torch.float32, "step").stride) == (3,)
    with pytest.raises(ValueError, match="needs 2 dims"):
        bank.view(torch.randn(7), torch.float32, "transposed")
    with pytest.raises(ValueError, match="no layout 'diagonal'"):
        bank.view(matrix, torch.float32, "diagonal")


def test_right_outputs_pass_in_every_layout():
    plan = build_plan(declared(CHECKS), seed=0, device="cpu")
    outcomes = _outcomes(plan, _evidence(plan))
    assert all(o.passed for o in outcomes.values()), {n: o.message for n, o in outcomes.items() if not o.passed}
    assert "lies within the min and max" in outcomes["convex_hull"].message


def test_the_contract_adds_each_declared_memory_order_and_catches_empty_like_of_a_permuted_input():
    cases = contract_cases(declared(CHECKS).inputs, CHECKS[3].cases)
    assert [(c.dtype, {k: str(v) for k, v in c.layouts.items()}) for c in cases[2:]] == [
        ("float32", {"q": "permuted(0, 2, 1, 3)", "v": "permuted(0, 2, 1, 3)"}),
        ("float32", {"q": "transposed", "v": "transposed"}),
        ("float16", {"q": "permuted(0, 2, 1, 3)", "v": "permuted(0, 2, 1, 3)"}),
        ("float16", {"q": "transposed", "v": "transposed"})]
    plan = build_plan(declared(CHECKS), seed=1, device="cpu")
    permuted = list(BSHD.strides((2, 3, 9, 4)))

    def empty_like_q(call, outs):
        if call.args[0].stride == permuted:  # torch.empty_like(q) keeps q's (B, S, H, D) order
            return [outs[0].permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)]
        return outs

    outcome = _outcomes(plan, _evidence(plan, empty_like_q))["output_contract"]
    assert not outcome.passed and "is not contiguous (strides (108, 4, 12, 1))" in outcome.message, outcome.message


def test_mismatch_rejections_swap_the_last_two_axes_of_any_rank():
    plan = build_plan(declared(CHECKS), seed=2, device="cpu")
    mismatch = next(c for c in plan.checks if c.name == "rejects_mismatch")
    ids = [call.id.split("/")[1] for call in mismatch.calls]
    assert ids == ["q_B", "q_H", "q_S", "q_D", "q_transposed_shape_SD", "q_dtype",
                   "v_B", "v_H", "v_S", "v_D", "v_transposed_shape_SD", "v_dtype", "device"]
    swapped = next(call for call in mismatch.calls if call.id.endswith("v_transposed_shape_SD"))
    assert swapped.args[1].size == [2, 3, 4, 9] and "its dims S and D swapped" in swapped.label


def test_coverage_names_an_unmasked_tail_along_any_axis():
    expected = torch.randn(2, 3, 9, 4, dtype=torch.float64)
    got = expected.clone()
    got[:, :, 5:, :] += 100.0  # every query from 5 on wrong, in every batch and head
    bad = (got - expected).abs() > 1e-6
    message = diagnose_coverage(got, bad, expected, ratio=bad.double() * 1e3)
    assert "Every index along axis 2 (of 9) from 5 on is wrong and every index before it is right" in message
    assert "stops short of the end of axis 2" in message
    assert diagnose_coverage(got[0, 0], bad[0, 0], expected[0, 0]).startswith(" Every row from row 5 on")


def test_a_property_outside_its_bounds_fails_with_the_element_and_the_hint_rule():
    plan = build_plan(declared(CHECKS), seed=3, device="cpu")

    def outside(call, outs):
        if not call.id.startswith("convex_hull"):
            return outs
        wrong = outs[0].clone()
        wrong[1, 2, 6, 3] = 50.0  # far beyond every v
        return [wrong]

    outcome = _outcomes(plan, _evidence(plan, outside))["convex_hull"]
    assert not outcome.passed and "out[1, 2, 6, 3] = 50" in outcome.message, outcome.message
    assert outcome.message.endswith("Hint: hint of convex_hull") and outcome.details["failure"]["index"] == [1, 2, 6, 3]

    def everywhere(call, outs):
        return [outs[0] * 100]

    outcome = _outcomes(plan, _evidence(plan, everywhere))["convex_hull"]
    assert "values fails too, on simpler inputs" in outcome.message, outcome.message  # hint_requires applied


def test_an_error_while_building_names_the_assignment_the_check_and_the_case():
    bad = (ValueCheck("strided_inputs", (CaseSpec(dims=DIMS, layouts={"q": Layout.permuted(0, 1, 2)}),)),)
    with pytest.raises(AssignmentError) as raised:
        build_plan(declared(bad), seed=0, device="cpu", assignment="toy_attention")
    text = str(raised.value)
    assert text.startswith("assignment toy_attention: check 'strided_inputs', case (2, 3, 9, 4) float32, q "
                           "permuted(0, 1, 2): ValueError: layout 'permuted(0, 1, 2)' orders axes"), text
    assert "Traceback (most recent call last)" in text and "in strides" in text


def test_an_assignment_passes_its_own_bank():
    class CountingBank(InputBank):
        placed = 0

        def view(self, values, dtype, layout="contiguous"):
            CountingBank.placed += 1
            return super().view(values, dtype, layout)

    bank = CountingBank()
    plan = build_plan(declared(CHECKS[:1]), seed=0, device="cpu", bank=bank)
    assert plan.bank is bank and CountingBank.placed == 2


def test_the_custom_check_recipe_of_the_authoring_guide_builds_and_judges():
    """docs/authoring.md, "A check of your own": its example, on the toy (whose query 0 is v[0])."""
    from grader.assignments.protocol import CustomCheck
    from grader.checks.evaluate import call_outputs, hint_for
    from grader.checks.generic import PlanBuilder
    from grader.checks.plan import PlannedCheck
    from grader.report.document import CheckOutcome

    def _first_row_is_v0(plan, declared):
        builder = PlanBuilder(declared, plan)
        call = builder.value_call("first_row/0", CaseSpec(dims={"B": 1, "H": 2, "S": 37, "D": 16}, dtype="float16"))
        hint = declared.hints["first_row"]

        def evaluate(check, evidence):
            outs, failure = call_outputs(check, call, evidence, hint)
            if failure is not None:
                return failure
            expectation = call.expectations(0)[0]
            got, want = outs[0][..., 0, :].double(), call.extra["placed"]["v"][..., 0, :].double()
            allowed = expectation.tolerance.allowed(want, expectation.scale[..., 0, :])
            passed = bool(((got - want).abs() <= allowed).all())
            return CheckOutcome(name=check.name, passed=passed, message="query 0 is v[0]" if passed else
                                f"{call.label}: query 0 is not v[0]." + hint_for(evidence, hint, ("float16_values",)))

        return PlannedCheck("first_row", [call], evaluate)

    plan = build_plan(declared((CustomCheck("first_row", _first_row_is_v0),)), seed=0, device="cpu")
    assert _outcomes(plan, _evidence(plan))["first_row"].passed

    def shifted(call, outs):
        return [outs[0] + 1.0]

    outcome = _outcomes(plan, _evidence(plan, shifted))["first_row"]
    assert not outcome.passed and outcome.message.endswith("Hint: hint of first_row")
