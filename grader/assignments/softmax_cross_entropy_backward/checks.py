"""``softmax_cross_entropy_backward``'s named checks: their inputs, oracles and evaluation.

``build_plan`` returns every check of one grading run in ``spec.CHECK_NAMES`` order. Inputs
come from one seeded generator; each call is ``softmax_cross_entropy_backward(x, t, grad)`` or,
where the check says so, with ``ignore_index=...`` as a keyword; each call carries its fp64
oracle; each check's ``evaluate`` turns the evidence the child sent back into a
``CheckOutcome``.
"""

from __future__ import annotations

import math

import torch

from grader.assignments.protocol import CaseSpec
from grader.assignments.softmax_cross_entropy_backward.inputs import (
    every_third_row,
    large_logits,
    make_logits,
    make_targets,
    random_case,
)
from grader.assignments.softmax_cross_entropy_backward.oracle import (
    autograd_xent_grad_fp64,
    central_difference_fp64,
    count_valid,
    xent_grad_fp64,
)
from grader.assignments.softmax_cross_entropy_backward.spec import (
    CENTRAL_DIFFERENCE_ATOL,
    CENTRAL_DIFFERENCE_H,
    CHECK_NAMES,
    DEFAULT_IGNORE_INDEX,
    HINTS,
    INPUTS,
    LONG_ROW,
    LONGEST_ROW,
    TOLERANCES,
)
from grader.checks import Tolerance, compare
from grader.contract import CheckOutcome
from grader.evaluate import (
    evaluate_output_contract,
    evaluate_raises,
    evaluate_row_sums,
    evaluate_triton_kernel,
    evaluate_values,
    point_failure,
    single_output,
    tolerance_fields,
)
from grader.generic_checks import contract_cases
from grader.harness.protocol import TensorSpec
from grader.plan import CheckEvidence, Plan, PlannedCall, PlannedCheck, dtype_name, scalar


def _grad_tensor(value: float) -> torch.Tensor:
    return torch.tensor(value, dtype=torch.float64)


def _replay_inputs(plan: Plan, t: torch.Tensor, cols: int, grad: float, ignore_index: int
                   ) -> tuple[torch.Tensor, torch.Tensor, float]:
    """New (x, t, grad) for replaying a call's Triton launches: fresh logits and classes, one
    ignored row more (or fewer) than the call had, so n_valid changes wherever it can (M > 1),
    and another grad, so launches that do not count the targets or read grad themselves do
    not reproduce the output."""
    rows = t.shape[0]
    ignored_before = int((t == ignore_index).sum())
    ignored_now = ignored_before + 1 if ignored_before + 1 < rows else max(ignored_before - 1, 0)
    ignored = tuple(int(r) for r in torch.randperm(rows, generator=plan.generator)[:ignored_now])
    x = make_logits(plan.generator, rows, cols)
    t_new = make_targets(plan.generator, rows, cols, ignored=ignored, ignore_index=ignore_index)
    if rows > 1 and count_valid(t_new, ignore_index) == count_valid(t, ignore_index):
        # ignore_index is a class that the new targets hit: change one row back or forth
        valid_rows = torch.nonzero(t_new != ignore_index).flatten()
        if len(valid_rows) > 1:
            t_new[int(valid_rows[0])] = ignore_index
        else:
            t_new[int(torch.nonzero(t_new == ignore_index).flatten()[0])] = 0 if ignore_index != 0 else 1
    magnitude = float(torch.empty((), dtype=torch.float64).uniform_(0.5, 2.0, generator=plan.generator))
    return x, t_new, (-magnitude if grad > 0 else magnitude)


def _value_call(plan: Plan, call_id: str, x_values: torch.Tensor, t_values: torch.Tensor, grad: float,
                dtype: torch.dtype, *, x_layout: str = "contiguous", t_layout: str = "contiguous",
                ignore_index: int | None = None, autograd: bool = False, label: str = "") -> PlannedCall:
    """A call on (x, t, grad) with x placed as a ``dtype`` view, t as an int64 view and grad as
    a 0-d float32 tensor; ``ignore_index`` is passed as a keyword when given (else the default
    -100 applies). The oracle is computed from the values as placed (rounded x, fp32 grad):
    the p - y formula, or PyTorch's fp64 autograd of F.cross_entropy when ``autograd``.

    Its Triton launches are recorded and replayed on new (x, t, grad) of the same shapes and
    layouts (``_replay_inputs``; check ``triton_kernel``), with the oracle of those values.
    """
    bank = plan.bank
    x_spec = bank.view(x_values, dtype, x_layout)
    t_spec = bank.view(t_values, torch.int64, t_layout)
    grad_spec = bank.view(_grad_tensor(grad), torch.float32)
    effective = DEFAULT_IGNORE_INDEX if ignore_index is None else ignore_index
    x_placed, t_placed, grad_placed = (bank.values_of(s) for s in (x_spec, t_spec, grad_spec))
    oracle, scale = xent_grad_fp64(x_placed, t_placed, grad_placed, effective)
    if autograd:
        oracle = autograd_xent_grad_fp64(x_placed, t_placed, grad_placed, effective)
    m, c = x_values.shape
    x_replay, t_replay, grad_replay = _replay_inputs(plan, t_placed, c, grad, effective)
    replay_args = [bank.relayout(x_spec, x_replay), bank.relayout(t_spec, t_replay),
                   bank.relayout(grad_spec, _grad_tensor(grad_replay))]
    replay_expected, replay_scale = xent_grad_fp64(*(bank.values_of(s) for s in replay_args), effective)
    n_valid = count_valid(t_placed, effective)
    default_label = f"({m}, {c}) {dtype_name(dtype)}, grad {grad:g}, n_valid {n_valid}"
    if ignore_index is not None:
        default_label += f", ignore_index={ignore_index}"
    kwargs = {} if ignore_index is None else {"ignore_index": scalar(ignore_index)}
    return PlannedCall(
        id=call_id,
        args=[x_spec, t_spec, grad_spec],
        kwargs=kwargs,
        label=label or default_label,
        expected=[oracle],
        scale=[scale],
        tolerance=TOLERANCES[dtype],
        out_dtype=dtype,
        record_launches=True,
        replay_args=replay_args,
        replay_kwargs=dict(kwargs),
        replay_expected=replay_expected,
        replay_scale=replay_scale,
        extra={"ignore_index": effective},
    )


def _inputs_of(call: PlannedCall, evidence: CheckEvidence) -> tuple[torch.Tensor, torch.Tensor, float, int]:
    """(x as fp64, t, grad, ignore_index) of a value call, as the child received them."""
    x_spec, t_spec, grad_spec = call.args
    bank = evidence.bank
    return (bank.values_of(x_spec).double(), bank.values_of(t_spec), float(bank.values_of(grad_spec)),
            int(call.extra["ignore_index"]))


def diagnose(got: torch.Tensor, call: PlannedCall, evidence: CheckEvidence) -> str:
    """Name the common mistake the output matches, if any (a hint, not a verdict): exp
    overflowing on large logits (NaN or inf only on rows whose logits exp cannot hold), or a
    known wrong formula."""
    x64, t, grad, ignore_index = _inputs_of(call, evidence)
    m, c = x64.shape
    bad_rows = ~torch.isfinite(got.double()).all(dim=-1) if got.dim() == 2 and got.shape[0] == m else None
    if bad_rows is not None and bool(bad_rows.any()) and bool(torch.isfinite(x64).all()):
        # exp(x) overflows fp32 past log(fp32 max) = 88.72; a max-subtracted exp never does.
        overflow = x64.abs().amax(dim=-1) > math.log(torch.finfo(torch.float32).max)
        if bool(overflow[bad_rows].all()):
            return (f" Your output is NaN or inf on {int(bad_rows.sum())} rows, each with logits beyond +-88.7,"
                    f" where exp(x) overflows fp32 (and exp(-x) underflows to 0): subtract the row max before exp.")
    valid = (t != ignore_index).unsqueeze(1)
    n_valid = int(valid.sum())
    p = torch.softmax(x64, dim=-1)
    y = torch.zeros_like(p)
    in_range = (t >= 0) & (t < c)
    y[in_range, t[in_range]] = 1.0  # the one-hot a kernel that ignores ignore_index would build
    y_valid = y * valid
    per_valid = grad / n_valid if n_valid else 0.0
    _, scale = xent_grad_fp64(x64, t, grad, ignore_index)
    candidates = {
        "(p - y) * grad without the division by n_valid (the mean over valid rows)": (p - y_valid) * valid * grad,
        "(y - p) * grad / n_valid: the sign is flipped": (y_valid - p) * valid * per_valid,
        "a softmax over dim 0 (down each column, across rows) instead of over the classes of each row":
            (torch.softmax(x64, dim=0) - y_valid) * valid * per_valid,
        "(p - y) / n_valid: the upstream gradient grad is missing (taken as 1)":
            (p - y_valid) * valid * (1.0 / n_valid if n_valid else 0.0),
        "ignore_index is not honoured: ignored rows get p * grad / M and every row is counted":
            (p - y) * (grad / m),
        "the mean divides by every row (M) instead of n_valid, the rows whose target is not ignore_index":
            (p - y_valid) * valid * (grad / m),
        "ignored rows are not zeroed (they get p * grad / n_valid)": (p - y) * per_valid,
        "all zeros": torch.zeros_like(p),
    }
    expected = call.expected[0]
    for description, candidate in candidates.items():
        if got.shape != candidate.shape or compare(candidate, expected, scale, call.tolerance).passed:
            continue  # on these inputs the mistake gives the right answer: it cannot be told apart
        # The candidate's own magnitude joins the scale: the oracle's scale is 0 on ignored rows
        # and tiny where the right p is tiny, but the mistaken formula has its own fp32 roundings.
        if compare(got, candidate, scale + candidate.abs(), call.tolerance).passed:
            return f" Your output matches {description}."
    return ""


def _values(name: str, *, with_diagnosis: bool = True):
    def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
        return evaluate_values(check, evidence, hint=HINTS[name], diagnose=diagnose if with_diagnosis else None)

    return evaluate


# --- the checks -----------------------------------------------------------------------------
def _check_example_three_class(plan: Plan) -> PlannedCheck:
    """The lesson's worked example: p = [0.25, 0.60, 0.15], target class 1, so p - y =
    [0.25, -0.40, 0.15] with grad 1 and one row; then two rows (the second the lesson's
    p = [0.25, 0.65, 0.10], target 1): each row divided by n_valid = 2."""
    first = torch.tensor([0.25, 0.60, 0.15], dtype=torch.float64)
    second = torch.tensor([0.25, 0.65, 0.10], dtype=torch.float64)
    one = _value_call(plan, "example_three_class/0", first.log()[None], torch.tensor([1]), 1.0, torch.float32,
                      label="x = log([0.25, 0.60, 0.15]), t = [1], grad 1 (expected [0.25, -0.40, 0.15])")
    two = _value_call(plan, "example_three_class/1", torch.stack([first, second]).log(), torch.tensor([1, 1]), 1.0,
                      torch.float32,
                      label="x = log([[0.25, 0.60, 0.15], [0.25, 0.65, 0.10]]), t = [1, 1], grad 1 (expected "
                            "[[0.125, -0.2, 0.075], [0.125, -0.175, 0.05]])")
    return PlannedCheck("example_three_class", [one, two], _values("example_three_class"))


def _check_autograd_fp32(plan: Plan, rows: int) -> PlannedCheck:
    cases = [((rows, 128), 1.0, True), ((3, 1000), 0.37, False), ((rows + 1, 1025), -2.5, True),
             ((2, 4096), 4.0, False), ((rows, 3071), 1.0, True)]
    calls = []
    for index, ((m, c), grad, with_ignored) in enumerate(cases):
        x, t = random_case(plan.generator, m, c, ignored=every_third_row(m) if with_ignored else ())
        calls.append(_value_call(plan, f"autograd_fp32/{index}", x, t, grad, torch.float32, autograd=True))
    return PlannedCheck("autograd_fp32", calls, _values("autograd_fp32"))


def _check_half_precision(plan: Plan, rows: int) -> PlannedCheck:
    calls = []
    for dtype in (torch.float16, torch.bfloat16):
        for (m, c), grad in [((rows, 1000), 1.0), ((3, 4097), -0.5), ((2, LONG_ROW), 2.0)]:
            x, t = random_case(plan.generator, m, c, ignored=every_third_row(m))
            calls.append(_value_call(plan, f"half_precision/{dtype_name(dtype)}/{m}x{c}", x, t, grad, dtype))
    return PlannedCheck("half_precision", calls, _values("half_precision"))


def _check_central_difference(plan: Plan) -> PlannedCheck:
    calls = []
    for index, ((m, c), grad, ignored) in enumerate([((3, 37), 0.8, (1,)), ((2, 300), -1.5, ())]):
        # Rows 0-2 of make_logits' cycle (spreads 1, 4, 0.1): the loss stays small (|L| < 10), so
        # the fp64 difference quotient is good to ~1e-10 (spec.py).
        x = make_logits(plan.generator, m, c)
        t = make_targets(plan.generator, m, c, ignored=ignored)
        call = _value_call(plan, f"central_difference/{index}", x, t, grad, torch.float32)
        x32 = plan.bank.values_of(call.args[0])
        points = [(0, int(t[0]))]  # the target logit of a valid row
        if ignored:
            points.append((ignored[0], 5))  # a logit of an ignored row: slope 0
        while len(points) < 4:
            row = int(torch.randint(m, (1,), generator=plan.generator))
            col = int(torch.randint(c, (1,), generator=plan.generator))
            points.append((row, col))
        call.extra["points"] = [(row, col, central_difference_fp64(x32, t, grad, row, col, CENTRAL_DIFFERENCE_H))
                                 for row, col in points]
        calls.append(call)

    def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
        tolerance = Tolerance(rtol=TOLERANCES[torch.float32].rtol, atol=CENTRAL_DIFFERENCE_ATOL,
                              why="fp32 rtol plus 1e-9 for the finite-difference error (h=1e-5, fp64)")
        worst = 0.0
        count = 0
        for call in check.calls:
            out, failure = single_output(check, call, evidence, HINTS[check.name])
            if failure is not None:
                return failure
            for row, col, slope in call.extra["points"]:
                count += 1
                value = float(out[row, col].double())
                allowed = float(tolerance.allowed(torch.tensor(slope, dtype=torch.float64), call.scale[0][row, col]))
                err = abs(value - slope)
                ratio = err / allowed if math.isfinite(err) else math.inf
                worst = max(worst, ratio)
                if not err <= allowed:
                    return CheckOutcome(
                        name=check.name, passed=False, max_err_over_tolerance=worst,
                        message=f"{call.label} at logit [{row},{col}]: dx = {value:.8g}, central difference = "
                                f"{slope:.8g} (|err| {err:.3g} > allowed {allowed:.3g}; tolerance "
                                f"{tolerance.describe_short()}). Hint: {HINTS[check.name]}",
                        **point_failure(tolerance_fields(tolerance), call.label, [row, col], value, slope, allowed),
                    )
        return CheckOutcome(name=check.name, passed=True, max_err_over_tolerance=worst, cases=count,
                            message=f"{count} logits, h = 1e-5, worst error {worst:.2g} of tolerance",
                            **tolerance_fields(tolerance))

    return PlannedCheck("central_difference", calls, evaluate)


def _check_row_sum_invariant(plan: Plan, rows: int) -> PlannedCheck:
    calls = []
    for index, ((m, c), grad) in enumerate([((rows + 2, 513), 1.0), ((3, 8192), -3.0)]):
        x, t = random_case(plan.generator, m, c, ignored=every_third_row(m))
        calls.append(_value_call(plan, f"row_sum_invariant/{index}", x, t, grad, torch.float32))

    def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
        # Exact sum for the fp32 x given: (sum p - 1) * grad / n_valid ~ 0 on valid rows, 0 on
        # ignored rows. Allowed: the sum of the per-element bounds of the row (atol alone on
        # an ignored row, whose every element must be 0).
        def row_name(call: PlannedCall, row: int) -> str:
            _, t, _, ignore_index = _inputs_of(call, evidence)
            return f"row {row} ({'ignored' if int(t[row]) == ignore_index else 'valid'})"

        return evaluate_row_sums(check, evidence, tolerance=TOLERANCES[torch.float32], hint=HINTS[check.name],
                                 suffix=f" Hint: {HINTS[check.name]}", row_name=row_name)

    return PlannedCheck("row_sum_invariant", calls, evaluate)


def _check_ignore_index(plan: Plan, rows: int) -> PlannedCheck:
    """Ignored rows with the default -100, with ignore_index=-1, with ignore_index a valid class
    (3: rows whose target is 3 are ignored, as in PyTorch), all rows ignored (dx = 0) and one
    valid row among ignored ones (n_valid = 1). Oracle: fp64 autograd of F.cross_entropy."""
    calls = []
    m = rows + 2
    x, t = random_case(plan.generator, m, 200, ignored=range(1, m - 1, 2))
    calls.append(_value_call(plan, "ignore_index/default", x, t, 2.5, torch.float32, autograd=True,
                             label=f"({m}, 200) float32, every other row's target -100 (the default ignore_index)"))
    x, t = random_case(plan.generator, 5, 300, ignored=(1, 3), ignore_index=-1)
    calls.append(_value_call(plan, "ignore_index/minus_one", x, t, 0.6, torch.float32, ignore_index=-1, autograd=True,
                             label="(5, 300) float32, ignore_index=-1, rows 1 and 3 ignored"))
    x, t = random_case(plan.generator, 6, 50, ignored=(1, 4), ignore_index=3)
    calls.append(_value_call(plan, "ignore_index/a_class", x, t, -1.0, torch.float32, ignore_index=3, autograd=True,
                             label="(6, 50) float32, ignore_index=3 (a valid class: rows with target 3 are ignored)"))
    x, t = random_case(plan.generator, 4, 100, ignored=range(4))
    calls.append(_value_call(plan, "ignore_index/all_ignored", x, t, 1.0, torch.float32, autograd=True,
                             label="(4, 100) float32, every target -100 (n_valid = 0: dx is all zeros)"))
    x, t = random_case(plan.generator, 7, 64, ignored=(0, 1, 2, 3, 4, 6))
    t[5] = 63
    calls.append(_value_call(plan, "ignore_index/one_valid", x, t, 2.0, torch.float32, autograd=True,
                             label="(7, 64) float32, only row 5 valid (n_valid = 1)"))
    return PlannedCheck("ignore_index", calls, _values("ignore_index"))


def _check_stability_large_logits(plan: Plan) -> PlannedCheck:
    calls = []
    cases = [((4, 1000), torch.float32, True), ((4, 4097), torch.float32, False),
             ((4, 1000), torch.float16, True), ((4, 1000), torch.bfloat16, False)]
    for index, ((m, c), dtype, target_hot) in enumerate(cases):
        x, hot = large_logits(plan.generator, m, c)
        t = make_targets(plan.generator, m, c)
        if target_hot:
            t[2] = hot  # p is one-hot at the target: the row's dx is exactly 0
        elif int(t[2]) == hot:
            t[2] = (hot + 1) % c
        calls.append(_value_call(plan, f"stability_large_logits/{index}", x, t, 1.0, dtype,
                                 label=f"({m}, {c}) {dtype_name(dtype)}, logits at +-1e4 (rows: all near +1e4; "
                                       f"all near -1e4; one logit at 1e4; alternating +-1e4)"))
    return PlannedCheck("stability_large_logits", calls, _values("stability_large_logits"))


def _check_strided_inputs(plan: Plan, rows: int) -> PlannedCheck:
    cases = [
        ("transposed", "step", torch.float32, (rows, 300)),
        ("step", "contiguous", torch.float32, (3, 1000)),
        ("transposed_step", "step", torch.float32, (rows + 1, 129)),
        ("transposed", "step", torch.float16, (rows, 257)),
    ]
    calls = []
    for index, (x_layout, t_layout, dtype, (m, c)) in enumerate(cases):
        x, t = random_case(plan.generator, m, c, ignored=every_third_row(m))
        call = _value_call(plan, f"strided_inputs/{index}", x, t, 1.0, dtype, x_layout=x_layout, t_layout=t_layout)
        call.label = (f"({m}, {c}) {dtype_name(dtype)}, x {x_layout} (strides {tuple(call.args[0].stride)}), "
                      f"t {t_layout} (stride {tuple(call.args[1].stride)})")
        calls.append(call)
    return PlannedCheck("strided_inputs", calls, _values("strided_inputs"))


def _check_output_contract(plan: Plan, inputs: tuple) -> PlannedCheck:
    """Contiguous x in each dtype, and (generic_checks.contract_cases) the same with x
    transposed: the output must be a fresh contiguous tensor whatever x's layout
    (torch.empty_like(x) keeps a transposed x's strides)."""
    cases = contract_cases(inputs, (CaseSpec(dims={"M": 5, "C": 300}, dtype="float32"),
                                    CaseSpec(dims={"M": 3, "C": 257}, dtype="float16")))
    calls = []
    for index, spec in enumerate(cases):
        m, c = spec.dims["M"], spec.dims["C"]
        x, t = random_case(plan.generator, m, c, ignored=every_third_row(m))
        x_layout = spec.layouts.get("x", "contiguous")
        call = _value_call(plan, f"output_contract/{index}", x, t, 1.0, getattr(torch, spec.dtype), x_layout=x_layout)
        if x_layout != "contiguous":
            call.label += f", x {x_layout} (strides {tuple(call.args[0].stride)})"
        call.save_inputs_after = True
        calls.append(call)

    def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
        return evaluate_output_contract(check, evidence, hint=HINTS[check.name], device=plan.device)

    return PlannedCheck("output_contract", calls, evaluate)


def _expect_raise(call_id: str, label: str, x: TensorSpec, t: TensorSpec, grad: TensorSpec,
                  ignore_index: int | None = None) -> PlannedCall:
    kwargs = {} if ignore_index is None else {"ignore_index": scalar(ignore_index)}
    return PlannedCall(id=call_id, args=[x, t, grad], kwargs=kwargs, expect="raise", label=label)


def _raises(name: str):
    def evaluate(check: PlannedCheck, evidence: CheckEvidence) -> CheckOutcome:
        return evaluate_raises(check, evidence, hint=HINTS[name])

    return evaluate


def _check_rejects_mismatch(plan: Plan) -> PlannedCheck:
    bank = plan.bank
    x, t = random_case(plan.generator, 4, 8)
    x32 = bank.view(x, torch.float32)
    t64 = bank.view(t, torch.int64)
    grad = bank.view(_grad_tensor(1.0), torch.float32)
    t_other = bank.view(t, torch.int64)
    t_other.device = "other"
    grad_other = bank.view(_grad_tensor(1.0), torch.float32)
    grad_other.device = "other"
    longer = torch.cat([t, t[:1]])
    calls = [
        _expect_raise("rejects_mismatch/t_length", "x (4, 8) with t of 5 targets", x32, bank.view(longer, torch.int64),
                      grad),
        _expect_raise("rejects_mismatch/t_2d", "t of shape (4, 1) (targets are 1-D)", x32,
                      bank.view(t.unsqueeze(1), torch.int64), grad),
        _expect_raise("rejects_mismatch/t_float", "t of dtype float32 (class indices are int64)", x32,
                      bank.view(t.to(torch.float64), torch.float32), grad),
        _expect_raise("rejects_mismatch/grad_per_row", "grad of shape (4,) (one per row; this function takes the "
                      "0-d gradient of the mean loss)", x32, t64, bank.view(torch.ones(4, dtype=torch.float64),
                                                                            torch.float32)),
        _expect_raise("rejects_mismatch/t_device", "t on another device than x", x32, t_other, grad),
        _expect_raise("rejects_mismatch/grad_device", "grad on another device than x", x32, t64, grad_other),
    ]
    return PlannedCheck("rejects_mismatch", calls, _raises("rejects_mismatch"))


def _check_rejects_requires_grad(plan: Plan) -> PlannedCheck:
    bank = plan.bank
    x, t = random_case(plan.generator, 3, 16)
    x_grad = bank.view(x, torch.float32)
    x_grad.requires_grad = True
    grad_grad = bank.view(_grad_tensor(1.0), torch.float32)
    grad_grad.requires_grad = True
    calls = [
        _expect_raise("rejects_requires_grad/x", "x.requires_grad=True", x_grad, bank.view(t, torch.int64),
                      bank.view(_grad_tensor(1.0), torch.float32)),
        _expect_raise("rejects_requires_grad/grad", "grad.requires_grad=True", bank.view(x, torch.float32),
                      bank.view(t, torch.int64), grad_grad),
    ]
    return PlannedCheck("rejects_requires_grad", calls, _raises("rejects_requires_grad"))


def _check_rejects_out_of_range_targets(plan: Plan) -> PlannedCheck:
    """Targets that are neither ignore_index nor a class: C (one past the last class), -1 with the
    default ignore_index, and -100 when ignore_index is -1 (then -100 is no longer special)."""
    bank = plan.bank
    m, c = 4, 8
    x = make_logits(plan.generator, m, c)
    grad = _grad_tensor(1.0)
    cases = [
        ("class_c", torch.tensor([0, 3, 8, 7]), None, "t = [0, 3, 8, 7] with C = 8"),
        ("minus_one", torch.tensor([0, -1, 3, 7]), None, "t = [0, -1, 3, 7] with the default ignore_index -100"),
        ("default_index_not_ignored", torch.tensor([0, -100, 3, 7]), -1, "t = [0, -100, 3, 7] with ignore_index=-1"),
    ]
    calls = [
        _expect_raise(f"rejects_out_of_range_targets/{name}", label, bank.view(x, torch.float32),
                      bank.view(t, torch.int64), bank.view(grad, torch.float32), ignore_index)
        for name, t, ignore_index, label in cases
    ]
    return PlannedCheck("rejects_out_of_range_targets", calls, _raises("rejects_out_of_range_targets"))


def _check_edge_shapes(plan: Plan) -> PlannedCheck:
    shapes = [(1, 1), (1, 1000), (7, 1), (3, 3), (257, 2), (2, 4097), (2, LONG_ROW), (1, LONGEST_ROW + 3)]
    calls = []
    for index, (m, c) in enumerate(shapes):
        x, t = random_case(plan.generator, m, c, ignored=range(3, m - 1, 5))
        calls.append(_value_call(plan, f"edge_shapes/{index}", x, t, 1.0, torch.float32))
    return PlannedCheck("edge_shapes", calls, _values("edge_shapes"))


def _check_fresh_results(plan: Plan) -> PlannedCheck:
    m, c = 4, 512
    x, t = random_case(plan.generator, m, c, ignored=(1,))
    call = _value_call(plan, "fresh_results/0", x, t, 1.0, torch.float32,
                       label=f"({m}, {c}) float32, the same x, t and grad buffers refilled")
    for grad, ignored in [(-2.0, (2,)), (0.5, ())]:
        x_new, t_new = random_case(plan.generator, m, c, ignored=ignored)
        x32 = x_new.to(torch.float32)
        grad32 = _grad_tensor(grad).to(torch.float32)
        names = [plan.bank.add(x32.contiguous().reshape(-1)), plan.bank.add(t_new.reshape(-1)),
                 plan.bank.add(grad32.reshape(-1))]
        call.refills.append(dict(enumerate(names)))
        oracle, scale = xent_grad_fp64(x32, t_new, grad32)
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

    Raises:
        RuntimeError: the checks built here are out of step with CHECK_NAMES (a bug here).
    """
    plan = Plan(seed=seed, device=device)
    rows = 4 if device == "cpu" else 64
    plan.checks = [
        _check_example_three_class(plan),
        _check_autograd_fp32(plan, rows),
        _check_half_precision(plan, rows),
        _check_central_difference(plan),
        _check_row_sum_invariant(plan, rows),
        _check_ignore_index(plan, rows),
        _check_stability_large_logits(plan),
        _check_strided_inputs(plan, rows),
        _check_output_contract(plan, INPUTS),
        _check_rejects_mismatch(plan),
        _check_rejects_requires_grad(plan),
        _check_rejects_out_of_range_targets(plan),
        _check_edge_shapes(plan),
        _check_fresh_results(plan),
        _check_triton_kernel(plan),
    ]
    if tuple(c.name for c in plan.checks) != CHECK_NAMES:
        raise RuntimeError("softmax_cross_entropy_backward: the plan's checks are out of step with CHECK_NAMES")
    return plan
