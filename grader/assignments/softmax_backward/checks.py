"""``softmax_backward``'s named checks: their inputs, oracles and evaluation (the public contract).

``build_plan`` returns every check of one grading run in ``spec.CHECK_NAMES`` order. Inputs
come from one seeded generator; each check's calls carry their fp64 oracle; each check's
``evaluate`` turns the evidence the child sent back into a ``CheckOutcome``.
"""

from __future__ import annotations

import math

import torch

from grader.assignments.protocol import CaseSpec
from grader.assignments.softmax_backward.inputs import exact_case, random_case
from grader.assignments.softmax_backward.oracle import (
    autograd_vjp_fp64,
    central_difference_fp64,
    product_rounding_slack,
    vjp_fp64,
)
from grader.assignments.softmax_backward.spec import (
    CENTRAL_DIFFERENCE_ATOL,
    CENTRAL_DIFFERENCE_H,
    CHECK_NAMES,
    HINT_REQUIRES,
    HINTS,
    INPUTS,
    LARGE_OFFSET_DTYPE,
    LARGE_OFFSET_FIRST_ROW_PAST,
    LARGE_OFFSET_MIN_GPU_BYTES,
    LARGE_OFFSET_PATTERN_ROWS,
    LARGE_OFFSET_SAMPLE_ROWS,
    LARGE_OFFSET_SHAPE,
    LONG_ROW,
    TOLERANCES,
)
from grader.checks import Tolerance, compare
from grader.contract import CheckOutcome
from grader.evaluate import (
    describe_failure,
    evaluate_output_contract,
    evaluate_raises,
    evaluate_row_sums,
    evaluate_triton_kernel,
    evaluate_values,
    hint_for,
    point_failure,
    single_output,
    tolerance_fields,
)
from grader.generic_checks import contract_cases
from grader.harness.protocol import TensorSpec
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
    y_given, g_given = plan.bank.values_of(y_spec), plan.bank.values_of(g_spec)
    oracle, scale = vjp_fp64(y_given, g_given)
    rows, cols = y_values.shape
    _, y_replay, g_replay = random_case(plan.generator, rows, cols)
    y_again = plan.bank.relayout(y_spec, y_replay)
    g_again = plan.bank.relayout(g_spec, g_replay)
    y_replay_given, g_replay_given = plan.bank.values_of(y_again), plan.bank.values_of(g_again)
    replay_expected, replay_scale = vjp_fp64(y_replay_given, g_replay_given)
    return PlannedCall(
        id=call_id,
        args=[y_spec, g_spec],
        label=label or f"{tuple(y_values.shape)} {dtype_name(dtype)}",
        expected=[oracle if expected is None else expected],
        scale=[scale],
        slack=[product_rounding_slack(y_given, g_given)],
        tolerance=TOLERANCES[dtype],
        out_dtype=dtype,
        record_launches=True,
        replay_args=[y_again, g_again],
        replay_expected=replay_expected,
        replay_scale=replay_scale,
        replay_slack=product_rounding_slack(y_replay_given, g_replay_given),
    )


def _ulp(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of ``dtype`` numbers at |values| (fp64), subnormal spacing below the normal range."""
    info = torch.finfo(dtype)
    exponent = torch.floor(torch.log2(values.abs().clamp_min(info.smallest_normal)))
    return torch.exp2(exponent) * info.eps


def diagnose_half_precision(got: torch.Tensor, call: PlannedCall, y: torch.Tensor, g: torch.Tensor) -> str:
    """Name arithmetic in half precision that the output shows, or "".

    For float16/bfloat16 inputs (y, g as given, in their dtype) the error of such arithmetic is
    an error in dot, the same for a whole row. Fitting that per-row offset (least squares over
    the row, weights y) and adding y * offset back must leave an output within twice the
    tolerance (or a tenth of the error before); then:
      * an offset of more than half an ulp of |dot| in that dtype cannot come from rounding dot
        once: the row sum was accumulated in that dtype;
      * an output that matches y * (g - round(dot)) computed in that dtype (round(dot): the fp32
        dot rounded to it) had dot held in that dtype before g - dot;
      * a smaller offset still more than twice what an fp32 sum can be off by (rtol x
        sum|y*g|) is an accumulation in that dtype too (partial sums in vector lanes).
    """
    dtype = y.dtype
    if dtype not in (torch.float16, torch.bfloat16) or got.shape != y.shape or got.dim() != 2:
        return ""
    name = dtype_name(dtype)
    expected, scale = vjp_fp64(y, g)
    slack = product_rounding_slack(y, g)
    dot32 = (y.float() * g.float()).sum(dim=-1, keepdim=True)
    y64 = y.double()
    residual = got.double() - expected
    weight = (y64 * y64).sum(dim=-1, keepdim=True)
    offset = -(y64 * residual).sum(dim=-1, keepdim=True) / weight.clamp_min(1e-300)
    corrected = got.double() + y64 * offset
    # The output was rounded to the dtype at its own (wrong) size: allow that rounding too. The
    # offset is fitted, not known, so "explained" means: what is left is within twice the
    # tolerance, or a tenth of the error there was (this names a cause; the verdict was decided).
    rounding = slack + call.tolerance.vtol * got.double().abs()
    before = compare(got, expected, scale, call.tolerance, slack).max_ratio
    explained = bool(torch.isfinite(corrected).all()) and compare(
        corrected, expected, scale, call.tolerance, rounding).max_ratio <= max(2.0, before / 10)
    ulps = float((offset.abs() / _ulp(dot32.double(), dtype)).max()) if explained else 0.0
    fp32_room = call.tolerance.rtol * (y64 * g.double()).abs().sum(dim=-1, keepdim=True)
    beyond = float((offset.abs() / fp32_room.clamp_min(1e-300)).max()) if explained else 0.0
    accumulated = (f" The error is an offset in each row's dot (up to {float(offset.abs().max()):.3g}, {ulps:.2g}"
                   f" ulps of {name} at |dot|), {beyond:.3g} times what an fp32 sum of the products can be off by:"
                   f" the row sum was accumulated in {name} (a running total or partial sums kept in {name} round"
                   f" at every addition). Accumulate y*g in fp32.")
    if explained and ulps > 0.6 and beyond > 2:
        return accumulated
    subtraction_in_dtype = y * (g - dot32.to(dtype))
    if compare(got, subtraction_in_dtype.double(), scale, call.tolerance, slack).passed:
        return (f" Your output matches y*(g - dot) with dot rounded to {name} before the subtraction: dot was"
                f" held in {name} (g - dot in half precision, or the row sum accumulated in {name}). Keep dot and"
                f" g - dot in fp32 and round only the result to {name}.")
    if explained and beyond > 2:
        return accumulated
    return ""


def diagnose(got: torch.Tensor, call: PlannedCall, evidence: CheckEvidence) -> str:
    """Name the common mistake the output matches, if any (a hint, not a verdict): a wrong
    formula (sum(g) for sum(y*g), flipped sign, no dot term, wrong axis, all zeros) or
    half-precision arithmetic (diagnose_half_precision)."""
    if not all(isinstance(a, TensorSpec) for a in call.args[:2]):
        return ""
    y_given = evidence.bank.values_of(call.args[0])
    g_given = evidence.bank.values_of(call.args[1])
    y64, g64 = y_given.double(), g_given.double()
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
    return diagnose_half_precision(got, call, y_given, g_given)


def _values(name: str):
    def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
        return evaluate_values(check, evidence, hint=HINTS[name], diagnose=diagnose,
                               hint_requires=HINT_REQUIRES.get(name, ()))

    return evaluate


# --- the checks -----------------------------------------------------------------------------
def _check_example_two_element(plan: Plan) -> PlannedCheck:
    y = torch.tensor([[0.25, 0.75]], dtype=torch.float64)
    g = torch.tensor([[2.0, -1.0]], dtype=torch.float64)
    expected = torch.tensor([[0.5625, -0.5625]], dtype=torch.float64)
    call = _value_call(plan, "example_two_element/0", y, g, torch.float32, expected=expected, label="y=[0.25,0.75], g=[2,-1]")
    return PlannedCheck("example_two_element", [call], _values("example_two_element"))


def _check_autograd_fp32(plan: Plan, rows: int) -> PlannedCheck:
    shapes = [(rows, 300), (3, 1000), (rows + 1, 1025), (2, 4096), (rows, 4097)]
    calls = []
    for index, (m, n) in enumerate(shapes):
        x, y, g = random_case(plan.generator, m, n)
        call = _value_call(plan, f"autograd_fp32/{index}", y, g, torch.float32, label=f"({m}, {n}) fp32")
        call.expected = [autograd_vjp_fp64(x, g)]  # autograd at the logits, not the formula
        calls.append(call)
    return PlannedCheck("autograd_fp32", calls, _values("autograd_fp32"))


def _check_half_precision(plan: Plan, rows: int) -> PlannedCheck:
    """Random rows, and rows whose products and fp32 sums are exact (inputs.exact_case), in
    float16 and bfloat16. On the exact rows any allowed arithmetic is exact up to the final
    rounding, so a dot accumulated in half precision or g - dot in half precision shows."""
    calls = []
    for dtype in (torch.float16, torch.bfloat16):
        name = dtype_name(dtype)
        for m, n in [(rows, 1000), (3, 4097), (4, LONG_ROW)]:
            _, y, g = random_case(plan.generator, m, n)
            calls.append(_value_call(plan, f"half_precision/{name}/{m}x{n}", y, g, dtype, label=f"({m}, {n}) {name}"))
        for m, n in [(rows, 4096), (1, LONG_ROW)]:
            y, g = exact_case(plan.generator, m, n)
            calls.append(_value_call(plan, f"half_precision/{name}/exact/{m}x{n}", y, g, dtype,
                                     label=f"({m}, {n}) {name}, exactly representable products"))
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
                        **point_failure(tolerance_fields(tolerance), call.label, [row, col], value, slope, allowed),
                    )
        return CheckOutcome(name=check.name, passed=True, max_err_over_tolerance=worst, cases=8,
                            message=f"8 logits, h = 1e-5, worst error {worst:.2g} of tolerance",
                            **tolerance_fields(tolerance))

    return PlannedCheck("central_difference", calls, evaluate)


def _check_row_sum_invariant(plan: Plan, rows: int) -> PlannedCheck:
    calls = []
    for index, (m, n) in enumerate([(rows, 1025), (3, 4096)]):
        _, y, g = random_case(plan.generator, m, n)
        calls.append(_value_call(plan, f"row_sum_invariant/{index}", y, g, torch.float32, label=f"({m}, {n}) fp32"))

    def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
        # Exact sum for the fp32 y given: dot * (1 - sum(y)), ~0. Allowed: the sum of the
        # per-element bounds of the row.
        return evaluate_row_sums(check, evidence, tolerance=TOLERANCES[torch.float32], hint=HINTS[check.name],
                                 suffix=hint_for(evidence, HINTS[check.name], HINT_REQUIRES[check.name]))

    return PlannedCheck("row_sum_invariant", calls, evaluate)


def _check_strided_inputs(plan: Plan, rows: int) -> PlannedCheck:
    """y and g with their own row and column strides. The fp16 case uses rows with exactly
    representable products (inputs.exact_case), as half_precision does, so that a kernel whose
    half-precision arithmetic is wrong fails it by a wide margin, not by the luck of the draw
    (its message then points at half_precision)."""
    cases = [
        ("transposed", "step", torch.float32, (rows, 300), False),
        ("step", "transposed_step", torch.float32, (3, 1000), False),
        ("transposed_step", "transposed", torch.float32, (rows + 1, 37), False),
        ("transposed", "step", torch.float16, (rows, 4096), True),
    ]
    calls = []
    for index, (y_layout, g_layout, dtype, (m, n), exact) in enumerate(cases):
        if exact:
            y, g = exact_case(plan.generator, m, n)
        else:
            _, y, g = random_case(plan.generator, m, n)
        call = _value_call(plan, f"strided_inputs/{index}", y, g, dtype, y_layout=y_layout, g_layout=g_layout,
                           label=f"({m}, {n}) {dtype_name(dtype)}, y {y_layout}, g {g_layout}"
                                 + (", exactly representable products" if exact else ""))
        call.label += f" (y strides {tuple(call.args[0].stride)}, g strides {tuple(call.args[1].stride)})"
        calls.append(call)
    return PlannedCheck("strided_inputs", calls, _values("strided_inputs"))


def _check_output_contract(plan: Plan, rows: int) -> PlannedCheck:
    """Contiguous, transposed and strided inputs, and (generic_checks.contract_cases) both
    inputs transposed in every dtype: the output must be a fresh contiguous tensor whatever the
    inputs' layout (torch.empty_like(y) keeps a transposed y's strides)."""
    given = (
        CaseSpec(dims={"M": 5, "N": 300}, dtype="float32"),
        CaseSpec(dims={"M": 3, "N": 300}, dtype="float16"),
        CaseSpec(dims={"M": rows, "N": 300}, dtype="float32", layouts={"y": "transposed", "g": "transposed"}),
        CaseSpec(dims={"M": 3, "N": 1000}, dtype="float16", layouts={"y": "step", "g": "transposed_step"}),
    )
    calls = []
    for index, spec in enumerate(contract_cases(INPUTS, given)):
        m, n = spec.dims["M"], spec.dims["N"]
        y_layout, g_layout = spec.layouts.get("y", "contiguous"), spec.layouts.get("g", "contiguous")
        dtype = getattr(torch, spec.dtype)
        _, y, g = random_case(plan.generator, m, n)
        label = f"({m}, {n}) {dtype_name(dtype)}" + ("" if y_layout == g_layout == "contiguous"
                                                       else f", y {y_layout}, g {g_layout}")
        call = _value_call(plan, f"output_contract/{index}", y, g, dtype, y_layout=y_layout, g_layout=g_layout,
                           label=label)
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
    shapes = [(1, 1), (1, 1000), (7, 1), (3, 3), (2, 4097), (2, LONG_ROW)]
    calls = []
    for index, (m, n) in enumerate(shapes):
        _, y, g = random_case(plan.generator, m, n)
        calls.append(_value_call(plan, f"edge_shapes/{index}", y, g, torch.float32, label=f"({m}, {n}) fp32"))
    return PlannedCheck("edge_shapes", calls, _values("edge_shapes"))


def _check_fresh_results(plan: Plan) -> PlannedCheck:
    m, n = 4, 1000
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
        call.slack.append(product_rounding_slack(y_new.to(torch.float32), g_new.to(torch.float32)))
    return PlannedCheck("fresh_results", [call], _values("fresh_results"))


def _check_triton_kernel(plan: Plan) -> PlannedCheck:
    """Replays the recorded calls of the value checks that did not fail. A check that failed has
    already shown the kernel's arithmetic wrong on those inputs; a kernel whose error is near
    the tolerance (half precision done wrong) can then pass on one input and fail on the replay
    input, which would blame the Triton launches for the arithmetic."""
    def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
        failed = {name for name, outcome in evidence.earlier.items() if not outcome.passed and not outcome.skipped}
        recorded = [call for other in plan.checks if other.name not in failed
                    for call in other.calls if call.record_launches]
        return evaluate_triton_kernel(check, evidence, recorded=recorded, hint=HINTS[check.name])

    return PlannedCheck("triton_kernel", [], evaluate)


def _large_offsets_skip_reason(device: str) -> str | None:
    """Why large_offsets cannot run here, or None."""
    rows, cols = LARGE_OFFSET_SHAPE
    need = f"{rows} x {cols} {dtype_name(LARGE_OFFSET_DTYPE)} tensors (4.3 GB each)"
    if device != "cuda":
        return (f"not run: GPU only. It needs {need}, rows that start past 2^31 elements; the CPU interpreter "
                f"cannot run that in reasonable time. An int32 offset overflow is only caught on a GPU")
    total = torch.cuda.get_device_properties(0).total_memory
    if total < LARGE_OFFSET_MIN_GPU_BYTES:
        return (f"not run: this GPU has {total / 2**30:.1f} GiB; the check needs {need} and room for your "
                f"buffers, {LARGE_OFFSET_MIN_GPU_BYTES / 2**30:.1f} GiB in all")
    return None


def _check_large_offsets(plan: Plan) -> PlannedCheck:
    """y and g of LARGE_OFFSET_SHAPE (fp16, 2^31 + 294912 elements each), tiled from a few
    random rows in the child; the parent compares the output rows LARGE_OFFSET_SAMPLE_ROWS
    (around row 65536, the first that starts past 2^31 elements). Runs in a process of its own,
    after every other check: an int32 offset overflow usually ends in an illegal address, which
    kills the CUDA context."""
    rows, cols = LARGE_OFFSET_SHAPE
    skip = _large_offsets_skip_reason(plan.device)
    check = PlannedCheck("large_offsets", [], _evaluate_large_offsets, isolated=True, skip_reason=skip)
    if skip is not None:
        return check
    _, y, g = random_case(plan.generator, LARGE_OFFSET_PATTERN_ROWS, cols)
    y_spec = plan.bank.tiled(y, LARGE_OFFSET_DTYPE, rows)
    g_spec = plan.bank.tiled(g, LARGE_OFFSET_DTYPE, rows)
    sample = list(LARGE_OFFSET_SAMPLE_ROWS)
    y_rows = torch.stack([plan.bank.pattern_row(y_spec, r) for r in sample])
    g_rows = torch.stack([plan.bank.pattern_row(g_spec, r) for r in sample])
    expected, scale = vjp_fp64(y_rows, g_rows)
    check.calls = [PlannedCall(
        id="large_offsets/0", args=[y_spec, g_spec], label=f"({rows}, {cols}) {dtype_name(LARGE_OFFSET_DTYPE)}",
        expected=[expected], scale=[scale], slack=[product_rounding_slack(y_rows, g_rows)],
        tolerance=TOLERANCES[LARGE_OFFSET_DTYPE], out_dtype=LARGE_OFFSET_DTYPE, sample_rows=sample,
    )]
    return check


def _evaluate_large_offsets(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
    """The sampled rows must match; rows past 2^31 elements wrong while the rows before are
    right (or a crash) is named as an int32 offset overflow, with its hint; rows before 2^31
    elements wrong too are said not to be one (no int32 hint)."""
    call = check.calls[0]
    hint = hint_for(evidence, HINTS[check.name], HINT_REQUIRES[check.name])
    problem = describe_failure(evidence, call, call.id)
    if problem is not None:
        return CheckOutcome(name=check.name, passed=False, message=f"{problem}.{hint}")
    out = evidence.calls[call.id].out
    expected = call.expected[0]
    if out is None or tuple(out.shape) != tuple(expected.shape):
        return CheckOutcome(name=check.name, passed=False,
                            message=f"{call.label}: no output rows of shape {tuple(expected.shape)} came back.{hint}")
    sample = call.sample_rows or []
    bad_rows = []
    worst = 0.0
    for index, row in enumerate(sample):
        result = compare(out[index:index + 1], expected[index:index + 1], call.scale[0][index:index + 1],
                         call.tolerance, call.slack[0][index:index + 1])
        worst = max(worst, result.max_ratio) if not math.isnan(result.max_ratio) else math.inf
        if not result.passed:
            bad_rows.append((row, result))
    if not bad_rows:
        return CheckOutcome(name=check.name, passed=True, cases=len(sample), max_err_over_tolerance=worst,
                            message=f"{call.label}: rows {sample} right, including those past 2^31 elements")
    first_row, first = bad_rows[0]
    past = [row for row, _ in bad_rows]
    if all(row >= LARGE_OFFSET_FIRST_ROW_PAST for row in past):
        finding = (f" Rows {past} start past 2^31 elements and are wrong; every sampled row before them is right:"
                   f" an int32 offset overflow.")
    else:
        # Rows that start before 2^31 elements are wrong too: not what an offset overflow does,
        # so the int32 hint would mislead (only the failing checks it builds on are named).
        finding = (f" Rows before 2^31 elements are wrong too ({[r for r in past if r < LARGE_OFFSET_FIRST_ROW_PAST]}),"
                   f" so this is not an int32 offset overflow.")
        if hint.startswith(" Hint:"):
            hint = ""
    return CheckOutcome(name=check.name, passed=False, cases=len(sample), max_err_over_tolerance=worst,
                        message=f"{call.label}, row {first_row}: {first.describe()}.{finding}{hint}")


def build_plan(*, seed: int, device: str) -> Plan:
    """Every check's inputs and oracles for one grading run.

    Args:
        seed: seeds the one torch.Generator all inputs come from (the service mixes a secret
            deployment seed with the submission id; ``grader check`` defaults to 0).
        device: ``"cpu"`` (Triton interpreter: few rows per case; GPU-only checks skipped) or
            ``"cuda"`` (more rows, and large_offsets where the GPU has the memory).

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
        _check_output_contract(plan, rows),
        _check_rejects_mismatch(plan),
        _check_rejects_requires_grad(plan),
        _check_edge_shapes(plan),
        _check_fresh_results(plan),
        _check_triton_kernel(plan),
        _check_large_offsets(plan),
    ]
    if tuple(c.name for c in plan.checks) != CHECK_NAMES:
        raise RuntimeError("softmax_backward: the plan's checks are out of step with CHECK_NAMES")
    return plan
