"""``softmax_backward``'s named checks: their inputs, oracles and evaluation (the public contract).

``build_plan`` returns every check of one grading run in ``spec.CHECK_NAMES`` order. Inputs
come from one seeded generator; each check's calls carry their fp64 oracle; each check's
``evaluate`` turns the evidence the child sent back into a ``CheckOutcome``.
"""

from __future__ import annotations

import math

import torch

from grader.assignments.softmax_backward.inputs import random_case
from grader.assignments.softmax_backward.oracle import autograd_vjp_fp64, central_difference_fp64, vjp_fp64
from grader.assignments.softmax_backward.spec import (
    CENTRAL_DIFFERENCE_ATOL,
    CENTRAL_DIFFERENCE_H,
    CHECK_NAMES,
    HINTS,
    LONG_ROW,
    LONGEST_ROW,
    TOLERANCES,
)
from grader.checks import Tolerance, compare
from grader.contract import CheckOutcome
from grader.evaluate import (
    evaluate_output_contract,
    evaluate_raises,
    evaluate_triton_kernel,
    evaluate_values,
    single_output,
)
from grader.plan import CheckEvidence, Plan, PlannedCall, PlannedCheck, dtype_name


def _value_call(plan: Plan, call_id: str, y_values: torch.Tensor, g_values: torch.Tensor, dtype: torch.dtype,
                *, y_layout: str = "contiguous", g_layout: str = "contiguous", expected: torch.Tensor | None = None,
                label: str = "") -> PlannedCall:
    """A call on (y, g) placed as ``dtype`` views, with the oracle of the rounded values.

    Its Triton launches are recorded and replayed on new (y, g) of the same shape and layout
    (check ``triton_kernel``), with the oracle of those values.
    """
    y_spec = plan.bank.view(y_values, dtype, y_layout)
    g_spec = plan.bank.view(g_values, dtype, g_layout)
    oracle, scale = vjp_fp64(plan.bank.values_of(y_spec), plan.bank.values_of(g_spec))
    rows, cols = y_values.shape
    _, y_replay, g_replay = random_case(plan.generator, rows, cols)
    y_again = plan.bank.relayout(y_spec, y_replay)
    g_again = plan.bank.relayout(g_spec, g_replay)
    replay_expected, replay_scale = vjp_fp64(plan.bank.values_of(y_again), plan.bank.values_of(g_again))
    return PlannedCall(
        id=call_id,
        args=[y_spec, g_spec],
        label=label or f"{tuple(y_values.shape)} {dtype_name(dtype)}",
        expected=[oracle if expected is None else expected],
        scale=[scale],
        tolerance=TOLERANCES[dtype],
        out_dtype=dtype,
        record_launches=True,
        replay_args=[y_again, g_again],
        replay_expected=replay_expected,
        replay_scale=replay_scale,
    )


def diagnose(got: torch.Tensor, call: PlannedCall, evidence: CheckEvidence) -> str:
    """Name the common mistake the output matches, if any (a hint, not a verdict)."""
    y64 = evidence.bank.values_of(call.args[0]).double()
    g64 = evidence.bank.values_of(call.args[1]).double()
    _, scale = vjp_fp64(y64, g64)
    candidates = {
        "y*(g - sum(g)): the reduction must be sum(y*g), not sum(g)": y64 * (g64 - g64.sum(-1, keepdim=True)),
        "y*(sum(y*g) - g): the sign of the subtraction is flipped": y64 * ((y64 * g64).sum(-1, keepdim=True) - g64),
        "y*g: the dot term is missing": y64 * g64,
        "the sum ran along dim 0 (columns) instead of the last dim": y64 * (g64 - (y64 * g64).sum(0, keepdim=True)),
        "all zeros": torch.zeros_like(y64),
    }
    for description, candidate in candidates.items():
        if got.shape == candidate.shape and compare(got, candidate, scale, call.tolerance).passed:
            return f" Your output matches {description}."
    return ""


def _values(name: str, *, with_diagnosis: bool = False):
    def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
        return evaluate_values(check, evidence, hint=HINTS[name], diagnose=diagnose if with_diagnosis else None)

    return evaluate


# --- the checks -----------------------------------------------------------------------------
def _check_example_two_element(plan: Plan) -> PlannedCheck:
    y = torch.tensor([[0.25, 0.75]], dtype=torch.float64)
    g = torch.tensor([[2.0, -1.0]], dtype=torch.float64)
    expected = torch.tensor([[0.5625, -0.5625]], dtype=torch.float64)
    call = _value_call(plan, "example_two_element/0", y, g, torch.float32, expected=expected, label="y=[0.25,0.75], g=[2,-1]")
    return PlannedCheck("example_two_element", [call], _values("example_two_element", with_diagnosis=True))


def _check_autograd_fp32(plan: Plan, rows: int) -> PlannedCheck:
    shapes = [(rows, 128), (3, 1000), (rows + 1, 1025), (2, 4096), (rows, 3071)]
    calls = []
    for index, (m, n) in enumerate(shapes):
        x, y, g = random_case(plan.generator, m, n)
        call = _value_call(plan, f"autograd_fp32/{index}", y, g, torch.float32, label=f"({m}, {n}) fp32")
        call.expected = [autograd_vjp_fp64(x, g)]  # autograd at the logits, not the formula
        calls.append(call)
    return PlannedCheck("autograd_fp32", calls, _values("autograd_fp32", with_diagnosis=True))


def _check_half_precision(plan: Plan, rows: int) -> PlannedCheck:
    calls = []
    for dtype in (torch.float16, torch.bfloat16):
        for m, n in [(rows, 1000), (3, 4097), (4, LONG_ROW)]:
            _, y, g = random_case(plan.generator, m, n)
            name = dtype_name(dtype)
            calls.append(_value_call(plan, f"half_precision/{name}/{m}x{n}", y, g, dtype, label=f"({m}, {n}) {name}"))
    return PlannedCheck("half_precision", calls, _values("half_precision"))


def _check_central_difference(plan: Plan) -> PlannedCheck:
    calls = []
    for index, (m, n) in enumerate([(3, 37), (2, 300)]):
        x, y, g = random_case(plan.generator, m, n)
        call = _value_call(plan, f"central_difference/{index}", y, g, torch.float32, label=f"({m}, {n}) fp32")
        points = []
        for _ in range(4):
            row = int(torch.randint(m, (1,), generator=plan.generator))
            col = int(torch.randint(n, (1,), generator=plan.generator))
            points.append((row, col, central_difference_fp64(x, g, row, col, CENTRAL_DIFFERENCE_H)))
        call.extra["points"] = points
        calls.append(call)

    def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
        tolerance = Tolerance(
            rtol=TOLERANCES[torch.float32].rtol,
            atol=CENTRAL_DIFFERENCE_ATOL,
            why="fp32 rtol plus 1e-9 for the finite-difference error (h=1e-5, fp64)",
        )
        worst = 0.0
        for call in check.calls:
            out, failure = single_output(check, call, evidence, HINTS[check.name])
            if failure is not None:
                return failure
            for row, col, slope in call.extra["points"]:
                value = float(out[row, col].double())
                allowed = float(tolerance.allowed(torch.tensor(slope, dtype=torch.float64), call.scale[0][row, col]))
                err = abs(value - slope)
                ratio = err / allowed if math.isfinite(err) else math.inf
                worst = max(worst, ratio)
                if not err <= allowed:
                    return CheckOutcome(
                        name=check.name, passed=False, max_err_over_tolerance=worst,
                        message=f"{call.label} at logit [{row},{col}]: dx = {value:.8g}, central difference = {slope:.8g} "
                                f"(|err| {err:.3g} > allowed {allowed:.3g}; tolerance {tolerance.describe_short()}). "
                                f"Hint: {HINTS[check.name]}",
                    )
        return CheckOutcome(name=check.name, passed=True, max_err_over_tolerance=worst, cases=8,
                            message=f"8 logits, h = 1e-5, worst error {worst:.2g} of tolerance")

    return PlannedCheck("central_difference", calls, evaluate)


def _check_row_sum_invariant(plan: Plan, rows: int) -> PlannedCheck:
    calls = []
    for index, (m, n) in enumerate([(rows, 513), (3, 8192)]):
        _, y, g = random_case(plan.generator, m, n)
        calls.append(_value_call(plan, f"row_sum_invariant/{index}", y, g, torch.float32, label=f"({m}, {n}) fp32"))

    def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
        tolerance = TOLERANCES[torch.float32]
        worst = 0.0
        for call in check.calls:
            out, failure = single_output(check, call, evidence, HINTS[check.name])
            if failure is not None:
                return failure
            # Exact sum for the fp32 y given: dot * (1 - sum(y)), ~0. Allowed: the sum of the
            # per-element bounds of the row.
            row_sums = out.double().sum(dim=-1)
            expected = call.expected[0].sum(dim=-1)
            allowed = tolerance.allowed(call.expected[0], call.scale[0]).sum(dim=-1)
            ratio = ((row_sums - expected).abs() / allowed).nan_to_num(nan=math.inf)
            worst = max(worst, float(ratio.max()))
            if not bool((ratio <= 1).all()):
                row = int(ratio.argmax())
                return CheckOutcome(
                    name=check.name, passed=False, max_err_over_tolerance=worst,
                    message=f"{call.label}: row {row} of dx sums to {float(row_sums[row]):.6g}, expected "
                            f"{float(expected[row]):.3g} (allowed {float(allowed[row]):.3g}). Hint: {HINTS[check.name]}",
                )
        return CheckOutcome(name=check.name, passed=True, max_err_over_tolerance=worst,
                            message=f"every row sums to ~0 (worst {worst:.2g} of tolerance)")

    return PlannedCheck("row_sum_invariant", calls, evaluate)


def _check_strided_inputs(plan: Plan, rows: int) -> PlannedCheck:
    cases = [
        ("transposed", "step", torch.float32, (rows, 300)),
        ("step", "transposed_step", torch.float32, (3, 1000)),
        ("transposed_step", "transposed", torch.float32, (rows + 1, 129)),
        ("transposed", "step", torch.float16, (rows, 257)),
    ]
    calls = []
    for index, (y_layout, g_layout, dtype, (m, n)) in enumerate(cases):
        _, y, g = random_case(plan.generator, m, n)
        call = _value_call(plan, f"strided_inputs/{index}", y, g, dtype, y_layout=y_layout, g_layout=g_layout,
                           label=f"({m}, {n}) {dtype_name(dtype)}, y {y_layout}, g {g_layout}")
        call.label += f" (y strides {tuple(call.args[0].stride)}, g strides {tuple(call.args[1].stride)})"
        calls.append(call)
    return PlannedCheck("strided_inputs", calls, _values("strided_inputs"))


def _check_output_contract(plan: Plan) -> PlannedCheck:
    calls = []
    for index, (dtype, (m, n)) in enumerate([(torch.float32, (5, 300)), (torch.float16, (3, 257))]):
        _, y, g = random_case(plan.generator, m, n)
        call = _value_call(plan, f"output_contract/{index}", y, g, dtype)
        call.save_inputs_after = True
        calls.append(call)

    def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
        return evaluate_output_contract(check, evidence, hint=HINTS[check.name], device=plan.device)

    return PlannedCheck("output_contract", calls, evaluate)


def _expect_raise(call_id: str, label: str, y, g) -> PlannedCall:
    return PlannedCall(id=call_id, args=[y, g], expect="raise", label=label)


def _raises(name: str):
    def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
        return evaluate_raises(check, evidence, hint=HINTS[name])

    return evaluate


def _check_rejects_mismatch(plan: Plan) -> PlannedCheck:
    bank = plan.bank
    _, y, g = random_case(plan.generator, 4, 8)
    _, _, g_wide = random_case(plan.generator, 4, 9)
    y32 = bank.view(y, torch.float32)
    other = bank.view(g, torch.float32)
    other.device = "other"
    calls = [
        _expect_raise("rejects_mismatch/shape", "shape (4, 8) vs (4, 9)", y32, bank.view(g_wide, torch.float32)),
        _expect_raise("rejects_mismatch/transposed_shape", "shape (4, 8) vs (8, 4)", y32,
                      bank.view(g.t().contiguous(), torch.float32)),
        _expect_raise("rejects_mismatch/dtype", "dtype float32 vs float16", y32, bank.view(g, torch.float16)),
        _expect_raise("rejects_mismatch/device", "device mismatch (g on another device)", y32, other),
    ]
    return PlannedCheck("rejects_mismatch", calls, _raises("rejects_mismatch"))


def _check_rejects_requires_grad(plan: Plan) -> PlannedCheck:
    _, y, g = random_case(plan.generator, 3, 16)
    y_grad = plan.bank.view(y, torch.float32)
    y_grad.requires_grad = True
    g_grad = plan.bank.view(g, torch.float32)
    g_grad.requires_grad = True
    calls = [
        _expect_raise("rejects_requires_grad/y", "y.requires_grad=True", y_grad, plan.bank.view(g, torch.float32)),
        _expect_raise("rejects_requires_grad/g", "g.requires_grad=True", plan.bank.view(y, torch.float32), g_grad),
    ]
    return PlannedCheck("rejects_requires_grad", calls, _raises("rejects_requires_grad"))


def _check_edge_shapes(plan: Plan) -> PlannedCheck:
    shapes = [(1, 1), (1, 1000), (7, 1), (3, 3), (2, 4097), (2, LONG_ROW), (1, LONGEST_ROW + 3)]
    calls = []
    for index, (m, n) in enumerate(shapes):
        _, y, g = random_case(plan.generator, m, n)
        calls.append(_value_call(plan, f"edge_shapes/{index}", y, g, torch.float32, label=f"({m}, {n}) fp32"))
    return PlannedCheck("edge_shapes", calls, _values("edge_shapes"))


def _check_fresh_results(plan: Plan) -> PlannedCheck:
    m, n = 4, 512
    _, y, g = random_case(plan.generator, m, n)
    call = _value_call(plan, "fresh_results/0", y, g, torch.float32, label=f"({m}, {n}) fp32, same buffers refilled")
    for _ in range(2):
        _, y_new, g_new = random_case(plan.generator, m, n)
        y_name = plan.bank.add(y_new.to(torch.float32).contiguous().reshape(-1))
        g_name = plan.bank.add(g_new.to(torch.float32).contiguous().reshape(-1))
        call.refills.append({0: y_name, 1: g_name})
        oracle, scale = vjp_fp64(y_new.to(torch.float32), g_new.to(torch.float32))
        call.expected.append(oracle)
        call.scale.append(scale)
    return PlannedCheck("fresh_results", [call], _values("fresh_results"))


def _check_triton_kernel(plan: Plan) -> PlannedCheck:
    def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
        recorded = [call for other in plan.checks for call in other.calls if call.record_launches]
        return evaluate_triton_kernel(check, evidence, recorded=recorded, hint=HINTS[check.name])

    return PlannedCheck("triton_kernel", [], evaluate)


def build_plan(*, seed: int, device: str) -> Plan:
    """Every check's inputs and oracles for one grading run.

    Args:
        seed: seeds the one torch.Generator all inputs come from (the service mixes a secret
            deployment seed with the submission id; ``grader check`` defaults to 0).
        device: ``"cpu"`` (Triton interpreter: few rows per case) or ``"cuda"`` (more rows).

    Returns:
        Plan whose checks appear in CHECK_NAMES order.
    """
    plan = Plan(seed=seed, device=device)
    rows = 4 if device == "cpu" else 64
    plan.checks = [
        _check_example_two_element(plan),
        _check_autograd_fp32(plan, rows),
        _check_half_precision(plan, rows),
        _check_central_difference(plan),
        _check_row_sum_invariant(plan, rows),
        _check_strided_inputs(plan, rows),
        _check_output_contract(plan),
        _check_rejects_mismatch(plan),
        _check_rejects_requires_grad(plan),
        _check_edge_shapes(plan),
        _check_fresh_results(plan),
        _check_triton_kernel(plan),
    ]
    if tuple(c.name for c in plan.checks) != CHECK_NAMES:
        raise RuntimeError("softmax_backward: the plan's checks are out of step with CHECK_NAMES")
    return plan
