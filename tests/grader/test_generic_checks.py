"""The generic checks (grader/checks/generic.py) on a toy assignment declared as data: a call of
three inputs of different shapes (A (M, K), B (K, N), bias (N,)) returning two outputs of
different shapes (out = A @ B + bias (M, N) and colsum = sum over rows of A @ B (N,)).

The child is not run: the evidence it would send back is made here from the plan (right
outputs, then one mistake at a time), and every check's evaluate decides. CPU, milliseconds.
"""

from __future__ import annotations

import pytest
import torch

from grader.assignments.protocol import (
    Case,
    CaseSpec,
    CentralDifference,
    Declared,
    FreshResults,
    Invariant,
    OutputContract,
    OutputOracle,
    Rejects,
    RejectsMismatch,
    RejectsRequiresGrad,
    TensorInput,
    TensorOutput,
    TritonKernel,
    ValueCheck,
)
from grader.checks.generic import build_plan
from grader.checks.plan import CallEvidence, CheckEvidence
from grader.checks.tolerance import Tolerance
from grader.harness.protocol import CallReport, ExceptionReport, OutputMeta, ReplayReport

TOLERANCES = {"float32": Tolerance(rtol=1e-5, atol=1e-30, why="fp32 sums"),
              "float16": Tolerance(rtol=1e-5, vtol=2.0**-10, atol=2.0**-24, why="fp32 sums, one fp16 rounding")}


def make_case(generator, dims, exact):
    m, k, n = dims["M"], dims["K"], dims["N"]
    return Case(values={"A": torch.randn(m, k, generator=generator, dtype=torch.float64),
                        "B": torch.randn(k, n, generator=generator, dtype=torch.float64),
                        "bias": torch.randn(n, generator=generator, dtype=torch.float64)})


def oracle(values):
    a, b, bias = (values[k].double() for k in ("A", "B", "bias"))
    product = a @ b
    scale = a.abs() @ b.abs()
    return {"out": OutputOracle(product + bias, scale + bias.abs()),
            "colsum": OutputOracle(product.sum(0), scale.sum(0))}


SMALL = {"M": 3, "K": 5, "N": 4}
DIMS = ({"M": 4, "K": 7, "N": 6}, {"M": 1, "K": 1, "N": 3})
CHECKS = (
    ValueCheck("values", tuple(CaseSpec(dims=d) for d in DIMS)),
    ValueCheck("half_precision", (CaseSpec(dims=DIMS[0], dtype="float16"),)),
    ValueCheck("strided_inputs", (CaseSpec(dims=DIMS[0], layouts={"A": "transposed", "B": "step", "bias": "step"}),)),
    Invariant("column_sums", (CaseSpec(dims=DIMS[0]),), output="colsum",
              weights=lambda case, placed: torch.ones(6, dtype=torch.float64)),
    OutputContract("output_contract", (CaseSpec(dims=DIMS[0]), CaseSpec(dims=DIMS[0], dtype="float16"))),
    RejectsMismatch("rejects_mismatch", SMALL),
    RejectsRequiresGrad("rejects_requires_grad", SMALL),
    Rejects("rejects_nan_free", ((("bias with a NaN"), CaseSpec(dims=SMALL),
                                  lambda values: {**values, "bias": values["bias"] * float("nan")}),)),
    FreshResults("fresh_results", CaseSpec(dims=DIMS[0])),
    TritonKernel(),
)
DECLARED = Declared(
    inputs=(TensorInput("A", ("M", "K")), TensorInput("B", ("K", "N")), TensorInput("bias", ("N",))),
    outputs=(TensorOutput("out", ("M", "N"), TOLERANCES), TensorOutput("colsum", ("N",), TOLERANCES)),
    make_case=make_case, oracle=oracle, checks=lambda device: CHECKS,
    hints={name: f"hint of {name}" for name in (c.name for c in CHECKS)},
)


def _meta(tensor: torch.Tensor) -> OutputMeta:
    return OutputMeta(shape=list(tensor.shape), stride=list(tensor.stride()), dtype=str(tensor.dtype)[6:],
                      device="cpu", contiguous=tensor.is_contiguous())


def _evidence(plan, mistake=None):
    """What a right kernel's child would send back (every round, its replay, its bases), with
    ``mistake(call, outputs) -> outputs`` applied to the outputs of every call when given."""
    calls = {}
    for check in plan.checks:
        for call in check.calls:
            for round_index, round_id in enumerate(call.round_ids):
                if call.expect == "raise":
                    calls[round_id] = CallEvidence(report=CallReport(id=round_id, status="raised",
                                                                     exception=ExceptionReport(type="ValueError")),
                                                   out=None)
                    continue
                outs = [e.expected.to(e.dtype) for e in call.expectations(round_index)]
                if mistake is not None:
                    outs = mistake(call, outs)
                replayed = [e.expected.to(e.dtype) for e in call.replay_expectations()]
                report = CallReport(id=round_id, status="ok", out=_meta(outs[0]),
                                    more_outputs=[_meta(t) for t in outs[1:]],
                                    replay=ReplayReport(status="replayed", launches=1))
                bases = {spec.base: plan.bank.bases[spec.base].clone() for spec in call.tensors()}
                calls[round_id] = CallEvidence(report=report, out=outs[0], more_outs=outs[1:], bases_after=bases,
                                               replay_out=replayed[0] if replayed else None,
                                               more_replay_outs=replayed[1:])
    return calls


def _outcomes(plan, calls):
    earlier = {}
    for check in plan.checks:
        earlier[check.name] = check.evaluate(check, CheckEvidence(calls=calls, bank=plan.bank, earlier=dict(earlier)))
    return earlier


def test_the_plan_has_every_declared_check_in_order_and_two_outputs_per_call():
    plan = build_plan(DECLARED, seed=0, device="cpu", check_names=tuple(c.name for c in CHECKS))
    assert plan.outputs == 2 and plan.to_protocol(function="f", module_file="f.py", other_device="meta").outputs == 2
    call = plan.checks[0].calls[0]
    assert [o.name for o in call.outputs] == ["out", "colsum"]
    assert [tuple(e.expected.shape) for e in call.expectations(0)] == [(4, 6), (6,)]
    assert [s.size for s in call.args] == [[4, 7], [7, 6], [6]]
    assert call.record_launches and len(call.replay_args) == 3
    with pytest.raises(RuntimeError, match="out of step"):
        build_plan(DECLARED, seed=0, device="cpu", check_names=("values",))


def test_right_outputs_pass_every_check():
    plan = build_plan(DECLARED, seed=1, device="cpu")
    outcomes = _outcomes(plan, _evidence(plan))
    assert all(o.passed for o in outcomes.values()), {n: o.message for n, o in outcomes.items() if not o.passed}


def test_the_output_contract_adds_transposed_inputs_and_catches_empty_like():
    plan = build_plan(DECLARED, seed=2, device="cpu")
    contract = next(c for c in plan.checks if c.name == "output_contract")
    layouts = [[tuple(s.stride) for s in call.args] for call in contract.calls]
    assert any(strides[0] == (1, 4) for strides in layouts), layouts  # A (4, 7) transposed: strides (1, M)

    def empty_like_of_a_transposed_input(call, outs):
        if call.args[0].stride == [1, 4]:
            return [outs[0].t().contiguous().t(), outs[1]]  # right values, strides (1, M)
        return outs

    outcomes = _outcomes(plan, _evidence(plan, empty_like_of_a_transposed_input))
    assert not outcomes["output_contract"].passed
    assert "output out is not contiguous" in outcomes["output_contract"].message


def test_a_wrong_second_output_fails_the_value_checks_and_names_it():
    plan = build_plan(DECLARED, seed=3, device="cpu")

    def colsum_off(call, outs):
        wrong = outs[1].clone()
        wrong[0] += 1.0
        return [outs[0], wrong]

    outcomes = _outcomes(plan, _evidence(plan, colsum_off))
    assert not outcomes["values"].passed and "output colsum" in outcomes["values"].message
    assert not outcomes["column_sums"].passed
    assert outcomes["triton_kernel"].skipped  # no right output left to reproduce


def test_a_stale_result_fails_fresh_results_only():
    plan = build_plan(DECLARED, seed=4, device="cpu")
    first = {}

    def cached(call, outs):
        if call.id.startswith("fresh_results"):
            first.setdefault(call.id, outs)
            return first[call.id]
        return outs

    outcomes = _outcomes(plan, _evidence(plan, cached))
    assert [n for n, o in outcomes.items() if not o.passed] == ["fresh_results"]


def test_rejections_cover_every_input_axis_dtype_device_and_requires_grad():
    plan = build_plan(DECLARED, seed=5, device="cpu")
    mismatch = next(c for c in plan.checks if c.name == "rejects_mismatch")
    ids = [call.id.split("/")[1] for call in mismatch.calls]
    # M is A's alone (A (M+1, K) is a valid call), K and N are shared: only those are varied.
    assert ids == ["A_K", "A_dtype", "B_K", "B_N", "B_transposed_shape", "B_dtype", "bias_N", "bias_dtype", "device"]
    grads = next(c for c in plan.checks if c.name == "rejects_requires_grad")
    assert [sum(s.requires_grad for s in call.args) for call in grads.calls] == [1, 1, 1]
    calls = _evidence(plan)
    calls[mismatch.calls[1].id] = CallEvidence(report=CallReport(id=mismatch.calls[1].id, status="ok"), out=None)
    outcome = mismatch.evaluate(mismatch, CheckEvidence(calls=calls, bank=plan.bank))
    assert not outcome.passed and "did not raise" in outcome.message


def test_central_difference_matches_a_right_gradient():
    """A one-output toy whose output is a gradient: g = dL/d bias of L = sum(A @ B + bias), which
    is M for every j; the central difference of L over bias must match it."""
    def grad_oracle(values):
        bias = values["bias"].double()
        m = values["A"].shape[0]
        return {"g": OutputOracle(torch.full_like(bias, float(m)), torch.full_like(bias, float(m)))}

    declared = Declared(
        inputs=DECLARED.inputs, outputs=(TensorOutput("g", ("N",), TOLERANCES),), make_case=make_case,
        oracle=grad_oracle, hints={"central_difference": "h"},
        checks=lambda device: (CentralDifference("central_difference", (CaseSpec(dims=DIMS[0]),), output="g",
                                                 variable="bias",
                                                 loss=lambda case, bias: (case.values["A"] @ case.values["B"]
                                                                          + bias).sum()),))
    plan = build_plan(declared, seed=6, device="cpu")
    outcomes = _outcomes(plan, _evidence(plan))
    assert outcomes["central_difference"].passed, outcomes["central_difference"].message
    outcomes = _outcomes(plan, _evidence(plan, lambda call, outs: [outs[0] * 1.01]))
    assert not outcomes["central_difference"].passed
