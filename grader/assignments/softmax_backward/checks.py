"""``softmax_backward``'s named checks, declared as data for the generic core
(grader/checks/generic.py), and the maths only this assignment has: its input cases, its
diagnoses of known wrong formulas, and the GPU-only large_offsets check.

``build_plan`` returns every check of one grading run in ``spec.CHECK_NAMES`` order. Inputs
come from one seeded generator (``make_case``: logits behind y, or exactly representable
rows); the oracle is ``oracle.vjp_fp64`` with its slack (``product_rounding_slack``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from grader.assignments.protocol import (
    Case,
    CaseSpec,
    CentralDifference,
    CustomCheck,
    Declared,
    FreshResults,
    Invariant,
    OutputContract,
    OutputOracle,
    RejectsMismatch,
    RejectsRequiresGrad,
    TensorOutput,
    TritonKernel,
    ValueCheck,
)
from grader.assignments.softmax_backward.inputs import exact_case, random_case
from grader.assignments.softmax_backward.oracle import (
    autograd_vjp_fp64,
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
from grader.checks.evaluate import describe_failure, hint_for, hinted
from grader.checks.generic import build_plan as build_declared_plan
from grader.checks.plan import CheckEvidence, Plan, PlannedCall, PlannedCheck, dtype_name
from grader.checks.tolerance import compare
from grader.harness.protocol import TensorSpec
from grader.report.document import CheckOutcome

#: The output: dx (M, N) in the call's dtype, with spec.TOLERANCES per dtype.
OUTPUTS = (TensorOutput("dx", ("M", "N"), {dtype_name(dtype): tol for dtype, tol in TOLERANCES.items()}),)


def make_case(generator: torch.Generator, dims: Mapping[str, int], exact: bool) -> Case:
    """(y, g) of (M, N): y = softmax(x) of logits x (kept as ``hidden["x"]``) with varied spread
    and g with varied row means (inputs.random_case), or rows whose products and fp32 sums are
    exact in half precision (inputs.exact_case)."""
    m, n = dims["M"], dims["N"]
    if exact:
        y, g = exact_case(generator, m, n)
        return Case(values={"y": y, "g": g})
    x, y, g = random_case(generator, m, n)
    return Case(values={"y": y, "g": g}, hidden={"x": x})


def replay_case(generator: torch.Generator, case: Case) -> Case:
    """New random (y, g) of the call's shape for replaying its launches (random rows, also for
    a call on exact rows: the replay shows whether the launches do the work, not precision)."""
    m, n = case.values["y"].shape
    return make_case(generator, {"M": m, "N": n}, False)


def oracle(values: Mapping) -> dict[str, OutputOracle]:
    """The fp64 VJP of (y, g) as placed, its error scale and the exact slack of products
    rounded to the input dtype (oracle.product_rounding_slack)."""
    dx, scale = vjp_fp64(values["y"], values["g"])
    return {"dx": OutputOracle(dx, scale, product_rounding_slack(values["y"], values["g"]))}


def _autograd(case: Case, placed: Mapping) -> dict[str, torch.Tensor]:
    """dL/dx at the logits by fp64 autograd (not the formula)."""
    return {"dx": autograd_vjp_fp64(case.hidden["x"], case.values["g"])}


def _loss(case: Case, x: torch.Tensor) -> torch.Tensor:
    """L(x) = sum(softmax(x) * g) in fp64: dL/dx is the VJP at g."""
    return (torch.softmax(x, dim=-1) * case.values["g"].double()).sum()


def _example() -> Case:
    return Case(values={"y": torch.tensor([[0.25, 0.75]], dtype=torch.float64),
                        "g": torch.tensor([[2.0, -1.0]], dtype=torch.float64)},
                expected={"dx": torch.tensor([[0.5625, -0.5625]], dtype=torch.float64)})


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
                f" held in {name} (g - dot in half precision, or the row sum accumulated in {name}: a running"
                f" total whose error here is no more than that one rounding). Keep dot and"
                f" g - dot in fp32 and round only the result to {name}.")
    if explained and beyond > 2:
        return accumulated
    return ""


def diagnose(got: torch.Tensor, call: PlannedCall, evidence: CheckEvidence) -> str:
    """Name the common mistake the output matches, if any (a hint, not a verdict): a wrong
    formula (sum(g) for sum(y*g), a flipped sign, no dot term, wrong axis, all zeros) or
    half-precision arithmetic (diagnose_half_precision).

    Half-precision arithmetic is not named where autograd_fp32 failed: a kernel whose fp32
    outputs are wrong has a formula error, which the fitted per-row offset of
    diagnose_half_precision can mimic (y*(g + dot) is y*(g - dot) with an offset of 2*dot per
    row), and fp16 rounding cannot explain an fp32 failure."""
    if not all(isinstance(a, TensorSpec) for a in call.args[:2]):
        return ""
    y_given = evidence.bank.values_of(call.args[0])
    g_given = evidence.bank.values_of(call.args[1])
    y64, g64 = y_given.double(), g_given.double()
    _, scale = vjp_fp64(y64, g64)
    candidates = {
        "y*(g - sum(g)): the reduction must be sum(y*g), not sum(g)": y64 * (g64 - g64.sum(-1, keepdim=True)),
        "y*(sum(y*g) - g): the sign of the subtraction is flipped": y64 * ((y64 * g64).sum(-1, keepdim=True) - g64),
        "y*(g + sum(y*g)): the sign of the dot term is flipped": y64 * (g64 + (y64 * g64).sum(-1, keepdim=True)),
        "y*g: the dot term is missing": y64 * g64,
        "the sum ran along dim 0 (columns) instead of the last dim": y64 * (g64 - (y64 * g64).sum(0, keepdim=True)),
        "all zeros": torch.zeros_like(y64),
    }
    for description, candidate in candidates.items():
        if got.shape == candidate.shape and compare(got, candidate, scale, call.tolerance).passed:
            return f" Your output matches {description}."
    fp32 = evidence.earlier.get("autograd_fp32")  # absent (not evaluated): as in hint_for, not a failure
    if fp32 is not None and not fp32.passed and not fp32.skipped:
        return ""
    return diagnose_half_precision(got, call, y_given, g_given)


def _case(m: int, n: int, dtype: str = "float32", *, exact: bool = False, y: str = "contiguous",
          g: str = "contiguous", short: bool = True, key: str = "") -> CaseSpec:
    """A case of (M, N) = (m, n); its label as the messages have always named it (``fp32``
    for the value checks' float32 cases)."""
    layouts = {k: v for k, v in (("y", y), ("g", g)) if v != "contiguous"}
    name = "fp32" if short and dtype == "float32" and not layouts else dtype
    label = f"({m}, {n}) {name}" + ("" if not layouts else f", y {y}, g {g}") + (
        ", exactly representable products" if exact else "")
    return CaseSpec(dims={"M": m, "N": n}, dtype=dtype, layouts=layouts, exact=exact, label=label, key=key)


def checks(device: str) -> tuple:
    """Every check, in CHECK_NAMES order (rows per case: 4 on the CPU interpreter, 64 on a GPU).

    Each case is there for a reason (spec.ROW_LENGTHS): odd lengths, one past a block, the
    longest row; half precision on random rows and on exactly representable ones (where any
    allowed arithmetic is exact up to the final rounding, so half-precision accumulation
    shows); strided inputs with their own row and column strides (the fp16 case on exact rows,
    so that a kernel whose half-precision arithmetic is wrong fails it by a wide margin)."""
    rows = 4 if device == "cpu" else 64
    half = tuple(spec for dtype in ("float16", "bfloat16") for spec in (
        *(_case(m, n, dtype, key=f"{dtype}/{m}x{n}") for m, n in ((rows, 1000), (3, 4097), (4, LONG_ROW))),
        *(_case(m, n, dtype, exact=True, key=f"{dtype}/exact/{m}x{n}") for m, n in ((rows, 4096), (1, LONG_ROW)))))
    return (
        ValueCheck("example_two_element", (CaseSpec(dims={"M": 1, "N": 2}, label="y=[0.25,0.75], g=[2,-1]"),),
                   example=_example),
        ValueCheck("autograd_fp32", tuple(_case(m, n) for m, n in
                                          ((rows, 300), (3, 1000), (rows + 1, 1025), (2, 4096), (rows, 4097))),
                   reference=_autograd),
        ValueCheck("half_precision", half),
        CentralDifference("central_difference", (_case(3, 37), _case(2, 300)), output="dx", variable="x",
                          loss=_loss, points=4, h=CENTRAL_DIFFERENCE_H, atol=CENTRAL_DIFFERENCE_ATOL),
        Invariant("row_sum_invariant", (_case(rows, 1025), _case(3, 4096)), output="dx", what="rows sum to ~0"),
        ValueCheck("strided_inputs", (_case(rows, 300, y="transposed", g="step"),
                                      _case(3, 1000, y="step", g="transposed_step"),
                                      _case(rows + 1, 37, y="transposed_step", g="transposed"),
                                      _case(rows, 4096, "float16", exact=True, y="transposed", g="step"))),
        OutputContract("output_contract", (_case(5, 300, short=False), _case(3, 300, "float16"),
                                           _case(rows, 300, y="transposed", g="transposed"),
                                           _case(3, 1000, "float16", y="step", g="transposed_step"))),
        RejectsMismatch("rejects_mismatch", {"M": 4, "N": 8}),
        RejectsRequiresGrad("rejects_requires_grad", {"M": 3, "N": 16}),
        ValueCheck("edge_shapes", tuple(_case(m, n) for m, n in
                                        ((1, 1), (1, 1000), (7, 1), (3, 3), (2, 4097), (2, LONG_ROW)))),
        FreshResults("fresh_results", _case(4, 1000)),
        TritonKernel(),
        CustomCheck("large_offsets", lambda plan, declared: _check_large_offsets(plan)),
    )


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
        return CheckOutcome(name=check.name, passed=False, message=f"{problem}.{hint}", details=hinted({}, hint))
    out = evidence.calls[call.id].out
    expected = call.expected[0]
    if out is None or tuple(out.shape) != tuple(expected.shape):
        return CheckOutcome(name=check.name, passed=False, details=hinted({}, hint),
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
                        details=hinted({}, hint),
                        message=f"{call.label}, row {first_row}: {first.describe()}.{finding}{hint}")


DECLARED = Declared(inputs=INPUTS, outputs=OUTPUTS, make_case=make_case, oracle=oracle, checks=checks, hints=HINTS,
                    hint_requires=HINT_REQUIRES, diagnose=lambda got, call, evidence: diagnose(got, call, evidence),
                    replay_case=replay_case)


def build_plan(*, seed: int, device: str) -> Plan:
    """Every check's inputs and oracles for one grading run (grader.checks.generic.build_plan).

    Args:
        seed: seeds the one torch.Generator all inputs come from (the service mixes a secret
            deployment seed with the submission id; ``grader check`` defaults to 0).
        device: ``"cpu"`` (Triton interpreter: few rows per case; GPU-only checks skipped) or
            ``"cuda"`` (more rows, and large_offsets where the GPU has the memory).

    Returns:
        Plan whose checks appear in CHECK_NAMES order.
    """
    return build_declared_plan(DECLARED, seed=seed, device=device, check_names=CHECK_NAMES,
                               assignment="softmax_backward")
