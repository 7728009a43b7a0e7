"""Evaluators shared by the assignments' checks: outputs against oracles, the output contract,
expected exceptions.

Each takes a ``PlannedCheck`` and its ``CheckEvidence`` and returns the check's
``CheckOutcome``. Assignment-specific knowledge comes in as arguments: the hint for a failure,
and a ``diagnose`` function that names a known wrong formula when the output matches one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch

from grader.checks.launch_hints import diagnose_launches
from grader.checks.plan import CheckEvidence, PlannedCall, PlannedCheck, dtype_name
from grader.checks.poison import diagnose_unwritten
from grader.checks.tolerance import Comparison, Tolerance, compare
from grader.report.document import CheckOutcome

#: ``diagnose(out, call, evidence) -> sentence or ""``: names a known mistake the output matches.
Diagnose = Callable[[torch.Tensor, PlannedCall, CheckEvidence], str]


def describe_failure(evidence: CheckEvidence, call: PlannedCall, round_id: str) -> str | None:
    """Why a call round has no output to compare (no report, raised, not a tensor), or None."""
    got = evidence.calls.get(round_id)
    report = got.report if got else None
    if report is None:
        if round_id in evidence.stopped:
            return f"{call.label}: no result ({evidence.stopped[round_id]})"
        return f"{call.label}: no result (the process stopped before this call finished)"
    if report.status == "raised":
        exc = report.exception
        return f"{call.label}: raised {exc.type if exc else '?'}: {(exc.message if exc else '')[:300]}"
    if report.status == "not_tensor":
        return f"{call.label}: returned {report.returned_type}, not a torch.Tensor"
    return None


def call_outputs(check: PlannedCheck, call: PlannedCall, evidence: CheckEvidence, hint: str, round_index: int = 0
                 ) -> tuple[list[torch.Tensor] | None, CheckOutcome | None]:
    """Every output of one round of the call, each read back with its expected shape, else the
    failing outcome of ``check`` (raised, not a tensor, missing, or a shape that differs)."""
    round_id = call.round_ids[round_index]
    problem = describe_failure(evidence, call, round_id)
    got = evidence.calls.get(round_id)
    outs: list[torch.Tensor] = []
    if problem is None:
        found = got.outs()
        for expectation in call.expectations(round_index):
            out = found[expectation.index] if expectation.index < len(found) else None
            shape = tuple(expectation.expected.shape)
            if out is None or tuple(out.shape) != shape:
                name = "" if not call.outputs else f" {expectation.name}"
                problem = f"{call.label}: no output{name} of shape {shape} could be read back"
                break
            outs.append(out)
    if problem is not None:
        return None, CheckOutcome(name=check.name, passed=False, message=f"{problem}. Hint: {hint}",
                                  details={"hint": hint})
    return outs, None


def diagnose_coverage(got: torch.Tensor, comparison_bad: torch.Tensor, expected: torch.Tensor,
                      ratio: torch.Tensor | None = None, strided: bool = False) -> str:
    """Name an uncovered block of the output, the mark of a grid, loop bound or mask that stops
    short: NaN outputs where every input is finite, or every column (row) from some index on
    wrong (two at least) while every one before it is right. Any rank: for an N-D output the
    same pattern along each axis from the innermost out (attention's query axis: every query
    from 37 on wrong in every batch and head is a tail of S left unmasked); "" when nothing
    fits.

    ``strided``: the call's inputs are strided views and the same kernel passed the simpler
    (contiguous) checks. Either pattern there is the mark of loads that ignore an input's own
    strides (reading the NaN guards between its rows, or rows past the first at the wrong
    place), not of a grid or mask, and is named so.

    ``ratio`` (|err| / allowed per element, optional): when given, the row/column diagnosis
    also needs every wrong column (row) to be far off (``COVERAGE_MIN_RATIO`` times the allowed
    error or more), as unwritten or unreduced elements are; a precision error a little over
    the tolerance on some rows is not a grid that stops short.
    """
    got64 = got.double()
    not_finite = ~torch.isfinite(got64)
    if bool(not_finite.any()) and bool(torch.isfinite(expected).all()):
        first = [int(i) for i in torch.nonzero(not_finite)[0]]
        if strided:
            return (f" {int(not_finite.sum())} outputs are NaN or inf (the first at {first}) although every input"
                    f" is finite: the kernel read the NaN the grader puts around and between an input's rows."
                    f"{STRIDED_ADVICE}")
        return (f" {int(not_finite.sum())} outputs are NaN or inf (the first at {first}) although every input"
                f" is finite: the kernel read outside its inputs (the grader surrounds them with NaN) or left"
                f" those outputs unwritten (a grid, loop or mask that does not cover every element).")
    if got.dim() < 2:
        return ""
    if got.dim() == 2:
        axes = ((1, "column", "a grid, loop bound or mask that stops short of the row's end"),
                (0, "row", "a grid that launches too few programs for all rows"))
    else:  # any rank: every axis from the innermost out, named by its position and length
        axes = tuple((axis, f"index along axis {axis} (of {got.shape[axis]})",
                      f"a grid, loop bound or mask that stops short of the end of axis {axis}")
                     for axis in reversed(range(got.dim())))
    for axis, what, advice in axes:
        others = tuple(a for a in range(got.dim()) if a != axis)
        per_index = comparison_bad.any(dim=others) if others else comparison_bad
        if per_index.numel() < 2 or not bool(per_index.any()) or bool(per_index.all()):
            continue
        first_bad = int(torch.nonzero(per_index)[0])
        # Two wrong indices at least: one wrong element of a 1x2 output is no pattern.
        if 0 < first_bad <= per_index.numel() - 2 and bool(per_index[first_bad:].all()):
            if ratio is not None:
                worst_per_index = ratio.nan_to_num(nan=math.inf).amax(dim=others)[first_bad:]
                if not bool((worst_per_index >= COVERAGE_MIN_RATIO).all()):
                    continue
            if got.dim() == 2:
                start, before = f"Every {what} from {what} {first_bad} on", f"every {what} before it"
            else:
                start, before = f"Every {what} from {first_bad} on", "every index before it"
            if strided:
                return f" {start} is wrong and {before} is right.{STRIDED_ADVICE}"
            return f" {start} is wrong and {before} is right: look for {advice}."
    return ""


#: diagnose_coverage's advice on strided inputs where the contiguous ones were right.
STRIDED_ADVICE = (" These inputs are strided views and the same kernel was right on contiguous ones: load each input"
                  " with its own strides (x.stride(0), x.stride(1)), not a row length or 1.")


#: How far off (times the allowed error) every element of an uncovered column/row block must be
#: before diagnose_coverage names a grid, loop or mask: an unwritten or unreduced element is
#: off by the value itself, hundreds of times a tolerance; a precision error is a few times it.
COVERAGE_MIN_RATIO = 20.0


def _ratio(out: torch.Tensor, expected: torch.Tensor, scale: torch.Tensor, slack: torch.Tensor | None,
           tolerance: Tolerance) -> torch.Tensor:
    err = (out.double() - expected).abs()
    err = torch.where(torch.isfinite(out.double()), err, torch.full_like(err, math.inf))
    return err / tolerance.allowed(expected, scale, slack)


def _not_row_major(spec) -> bool:
    """The tensor argument ``spec`` is not a contiguous row-major view (axes of size 1 aside)."""
    expected_stride, step = [], 1
    for size in reversed(spec.size):
        expected_stride.insert(0, step)
        step *= size
    return any(size > 1 and stride != want for size, stride, want in zip(spec.size, spec.stride, expected_stride))


def _strided(call: PlannedCall) -> bool:
    """Some tensor input of ``call`` is not a contiguous row-major view."""
    return any(_not_row_major(spec) for spec in call.tensors())


def _strided_advice(call: PlannedCall) -> str:
    """STRIDED_ADVICE in the words of the call's strided inputs: a 1-D input (a bias, mean,
    rstd) has one stride, t.stride(0), not x.stride(0), x.stride(1)."""
    ranks = {len(spec.size) for spec in call.tensors() if _not_row_major(spec)}
    if ranks == {1}:
        return (" These inputs are strided views and the same kernel was right on contiguous ones: the strided ones"
                " here are 1-D (a bias, mean, rstd or target with a step between elements): load each with its own"
                " strides, one for a 1-D input (t.stride(0)), not 1.")
    if 1 in ranks:
        return (" These inputs are strided views and the same kernel was right on contiguous ones: load each input"
                " with its own strides, x.stride(0), x.stride(1) for 2-D ones and t.stride(0) for the 1-D ones (a bias,"
                " mean or rstd), not a row length or 1.")
    return STRIDED_ADVICE


def hint_for(evidence: CheckEvidence, hint: str, hint_requires: tuple[str, ...]) -> str:
    """The hint to append to a failure: the check's own hint when the simpler checks it builds
    on (``hint_requires``) passed, else a pointer to those that failed (the same mistake shows
    there on simpler inputs, so this check's own hint would probably mislead)."""
    failed = [name for name in hint_requires
              if name in evidence.earlier and not evidence.earlier[name].passed and not evidence.earlier[name].skipped]
    if not failed:
        return f" Hint: {hint}"
    names = " and ".join(failed)
    return f" {names} {'fails' if len(failed) == 1 else 'fail'} too, on simpler inputs: fix that first."


def evaluate_values(check: PlannedCheck, evidence: CheckEvidence, *, hint: str,
                    diagnose: Diagnose | None = None, hint_requires: tuple[str, ...] = ()) -> CheckOutcome:
    """Every round of every call must return the oracle's values within the dtype's tolerance.

    The first failure is described in full (count, worst index, got vs expected, the
    tolerance); a diagnosis (uncovered block, known wrong formula or arithmetic) replaces the
    generic hint when one fits. The hint itself is only given when the checks named in
    ``hint_requires`` passed (``hint_for``).

    The outcome's ``max_err_over_tolerance`` is the worst |err|/allowed over every compared
    element (infinity when an output is NaN or inf); ``details`` then also carries
    ``worst_finite_err_over_tolerance`` (over finite outputs) and ``non_finite_outputs``.
    """
    failures: list[str] = []
    worst_ratio = 0.0
    worst_finite = 0.0
    non_finite = 0
    worst_abs = 0.0
    compared = 0
    tolerance_reason = ""
    tolerances: dict[str, dict] = {}  # every tolerance compared against, in order, once
    smallest: tuple[int, dict] | None = None  # (elements, details["failure"]) of the smallest failing input
    finding = ""
    diagnosed = False
    for call in check.calls:
        for round_index, round_id in enumerate(call.round_ids):
            problem = describe_failure(evidence, call, round_id)
            if problem:
                failures.append(problem)
                continue
            found = evidence.calls[round_id].outs()
            for expectation in call.expectations(round_index):
                named = f" {expectation.name}" if call.outputs else ""
                out = found[expectation.index] if expectation.index < len(found) else None
                if out is None:
                    failures.append(f"{call.label}: output{named} could not be read back")
                    continue
                expected = expectation.expected
                if tuple(out.shape) != tuple(expected.shape):
                    failures.append(f"{call.label}: output{named} shape {tuple(out.shape)}, expected "
                                    f"{tuple(expected.shape)}")
                    continue
                if expectation.dtype is not None and out.dtype != expectation.dtype:
                    text = (f"{call.label}: output{named} dtype {dtype_name(out.dtype)}, expected "
                            f"{dtype_name(expectation.dtype)} (keep the input dtype)")
                    # Only the first failure is shown; the dtype returned is the mistake, unless a simpler
                    # check failed too (then hint_for points there).
                    if not failures and hint_for(evidence, hint, hint_requires).startswith(" Hint:"):
                        finding = (f" The output came back as {dtype_name(out.dtype)}: return it as "
                                   f"{dtype_name(expectation.dtype)}.")
                        diagnosed = True
                        text += "." + finding
                    failures.append(text)
                    continue
                scale, slack, tolerance = expectation.scale, expectation.slack, expectation.tolerance
                result: Comparison = compare(out, expected, scale, tolerance, slack)
                compared += 1
                tolerances.setdefault(tolerance.describe(), {"bound": tolerance.bound(), "why": tolerance.why})
                worst_ratio = result.max_ratio if math.isnan(result.max_ratio) else max(worst_ratio, result.max_ratio)
                worst_finite = max(worst_finite, result.max_finite_ratio)
                non_finite += result.nan_count
                worst_abs = max(worst_abs, result.max_abs_err)
                if not result.passed:
                    label = call.label + (f" (refill {round_index})" if round_index else "") + (
                        f", output {expectation.name}" if call.outputs else "")
                    if smallest is None or result.total < smallest[0]:
                        smallest = (result.total, _failure_details(label, result))
                    text = f"{label}: {result.describe()}; tolerance {tolerance.describe_short()}."
                    if not failures:  # only the first failure is shown, so only it is diagnosed
                        # A known wrong formula first: it names the mistake itself, where the coverage
                        # patterns (a column or row block wrong, NaN) only say where it shows.
                        # Every output is offered (layernorm's dw has its own known mistakes); a
                        # diagnose tells the outputs apart by shape.
                        if diagnose is not None and round_index == 0:
                            finding = diagnose(out, call, evidence)
                        if not finding:
                            finding = diagnose_launches(evidence.calls[round_id].report, refilled=round_index > 0)
                        if not finding:
                            finding = diagnose_unwritten(out)
                        if not finding:
                            ratio = _ratio(out, expected, scale, slack, tolerance)
                            strided = _strided(call) and hint_for(evidence, hint, hint_requires).startswith(" Hint:")
                            finding = diagnose_coverage(out, ~(ratio <= 1), expected, ratio, strided)
                            if strided:
                                finding = finding.replace(STRIDED_ADVICE, _strided_advice(call))
                        diagnosed = bool(finding)
                        text += finding
                    failures.append(text)
                    tolerance_reason = tolerance_reason or tolerance.describe()
    numbers: dict = {"cases": compared}
    details: dict = {"tolerances": list(tolerances.values())} if tolerances else {}
    if compared:
        numbers.update(max_abs_err=worst_abs, max_err_over_tolerance=worst_ratio)
        if non_finite:
            details.update(non_finite_outputs=non_finite, worst_finite_err_over_tolerance=worst_finite)
    if failures:
        more = f" (+{len(failures) - 1} more)" if len(failures) > 1 else ""
        hint_text = "" if diagnosed else hint_for(evidence, hint, hint_requires)
        if smallest is not None:
            details["failure"] = smallest[1]
        if diagnosed or hint_text:
            details["hint"] = (finding if diagnosed else hint_text).strip().removeprefix("Hint:").strip()
        return CheckOutcome(name=check.name, passed=False, message=failures[0].rstrip(".") + more + "." + hint_text,
                            tolerance=tolerance_reason or None, details=details, **numbers)
    return CheckOutcome(name=check.name, passed=True, message=f"{compared} cases, worst error {worst_ratio:.2g} of tolerance",
                        tolerance="; ".join(tolerances) or None, details=details, **numbers)


def tolerance_fields(tolerance: Tolerance, bound: str | None = None) -> dict:
    """``tolerance`` and ``details.tolerances`` of a CheckOutcome compared against
    `tolerance` (its bound, or `bound` when the check sums or transforms it), for a check
    that does not go through ``evaluate_values``."""
    bound = bound or tolerance.bound()
    return {"tolerance": f"{bound} ({tolerance.why})",
            "details": {"tolerances": [{"bound": bound, "why": tolerance.why}]}}


def hinted(details: dict | None, hint_text: str) -> dict:
    """`details` with ``hint``: `hint_text` as ``hint_for`` returns it (`` Hint: ...`` or ""),
    its mark removed. The one structured place a hint is read from (grader.report.document.summarize,
    the class analytics), since a message may also hold the submission's own text."""
    hint = hint_text.strip().removeprefix("Hint:").strip()
    return {**(details or {}), "hint": hint} if hint else dict(details or {})


def point_failure(fields: dict, label: str, index: list[int], got: float, expected: float, allowed: float,
                  *, hint: str | None = None) -> dict:
    """`fields` (``tolerance_fields``) with ``details.failure`` for one failing element (as
    ``_failure_details`` writes it for a whole output), and ``details.hint`` when given."""
    details = {**fields.get("details", {}), "failure": {
        "input": label, "elements": 1, "index": index, "got": got, "expected": expected, "allowed": allowed}}
    if hint:
        details["hint"] = hint
    return {**fields, "details": details}


def _failure_details(label: str, result: Comparison) -> dict:
    """``details["failure"]`` of a failing check (grader.report.document.ReportSummary reads it): the
    input in words, its element count, and the worst element's index, got, expected and allowed
    error (floats; NaN/inf as they are)."""
    return {"input": label, "elements": result.total,
            "index": list(result.worst_index) if result.worst_index is not None else None,
            "got": result.got_at_worst, "expected": result.expected_at_worst, "allowed": result.allowed_at_worst}


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bits (NaN payloads included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if not a.dtype.is_floating_point:
        return bool(torch.equal(a, b))
    int_type = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return bool(torch.equal(a.view(int_type), b.view(int_type)))


def evaluate_output_contract(check: PlannedCheck, evidence: CheckEvidence, *, hint: str, device: str,
                             labels: Mapping[str, str] | None = None) -> CheckOutcome:
    """The output is a fresh contiguous tensor of the expected shape, dtype and device, sharing
    no memory with the inputs, and every input base (guards included) is bitwise unchanged.

    The inputs after the call come from two observers: the check child (the bases it saved,
    ``bases_after``; under the CPU interpreter the only one) and, on a GPU, the trusted replay
    process, which replayed the recorded launches of this check's calls on the same bases, and
    of every other recorded call on its replay inputs, and compared them bitwise
    (``replay_inputs_modified``). A change either saw fails the check: a submission that
    restores an input in its own process after a stray store deceives the first, never the
    second. ``labels``: call id -> its label, for the plan's other calls (messages name them)."""
    problems: list[str] = []
    kinds: set[str] = set()  # what was wrong: shape, dtype, device, contiguous, input (aliased or modified)
    for call in check.calls:
        problem = describe_failure(evidence, call, call.id)
        if problem:
            problems.append(problem)
            kinds.add("call")
            continue
        got = evidence.calls[call.id]
        metas = got.report.outputs()
        expectations = call.expectations(0) if call.expected else []
        if not metas:
            problems.append(f"{call.label}: no output description came back")
            continue
        for expectation, meta in zip(expectations or [None] * len(metas), metas):
            named = f" {expectation.name}" if expectation is not None and call.outputs else ""
            want_shape = list(expectation.expected.shape) if expectation is not None else None
            want_dtype = dtype_name(expectation.dtype) if expectation is not None and expectation.dtype else None
            if want_shape is not None and meta.shape != want_shape:
                problems.append(f"{call.label}: output{named} shape {tuple(meta.shape)}, expected {tuple(want_shape)}")
                kinds.add("shape")
            if want_dtype is not None and meta.dtype != want_dtype:
                problems.append(f"{call.label}: output{named} dtype {meta.dtype}, expected {want_dtype}")
                kinds.add("dtype")
            if not meta.device.startswith(device.split(":")[0]):
                problems.append(f"{call.label}: output{named} on {meta.device}, inputs on {device}")
                kinds.add("device")
            if not meta.contiguous:
                problems.append(f"{call.label}: output{named} is not contiguous (strides {tuple(meta.stride)})")
                kinds.add("contiguous")
            if meta.aliases_input:
                problems.append(f"{call.label}: output{named} shares memory with an input (must be a fresh tensor)")
                kinds.add("input")
        for spec in call.tensors():
            if spec.device != "primary":
                continue
            before = evidence.bank.bases[spec.base]
            after = got.bases_after.get(spec.base)
            if after is None or not bitwise_equal(before, after):
                problems.append(f"{call.label}: an input (or the memory around it) was modified by the call")
                kinds.add("input")
                break
    observed = 0
    labels = {**(labels or {}), **{call.id: call.label for call in check.calls}}
    for call_id, got in evidence.calls.items():
        if got.replay_inputs_modified is None:
            continue
        observed += 1
        if got.replay_inputs_modified and len(problems) < 3:
            problems.append(f"{labels.get(call_id, call_id)}: an input (or the memory around it) was modified by the "
                            f"call's Triton launches ({', '.join(got.replay_inputs_modified[:3])}), seen when the "
                            "trusted replay ran them on the grader's own buffers")
            kinds.add("input")
    if problems:
        contract_hint = _contract_hint(kinds, hint)
        return CheckOutcome(name=check.name, passed=False, details={"hint": contract_hint},
                            message="; ".join(problems[:3]) + f". Hint: {contract_hint}")
    seen = f" (the trusted replay saw {observed} calls' launches leave their inputs as they were)" if observed else ""
    return CheckOutcome(name=check.name, passed=True,
                        message=f"{len(check.calls)} calls: fresh contiguous output of the right shape, dtype and "
                                f"device; inputs untouched{seen}")


#: The hint of an output_contract failure of one kind only: what the evidence singles out.
CONTRACT_HINTS = {
    "contiguous": "allocate the output with torch.empty(shape, dtype=..., device=...): torch.empty_like of a "
                  "transposed input keeps that input's layout",
    "input": "write the result into a freshly allocated output; never into an input, and return that output",
    "dtype": "allocate each output in the dtype the contract gives it (the inputs' dtype), never a fixed one: every "
             "dtype the contract allows is called, a bfloat16 call included",
}


def _contract_hint(kinds: set[str], hint: str) -> str:
    """The hint for an output_contract failure: the one for its kind of problem when only one
    kind showed (CONTRACT_HINTS), else the assignment's whole hint (``hint``). An output that is
    an input has that input's layout, so a non-contiguous output beside it is the same mistake."""
    if "input" in kinds:
        kinds = kinds - {"contiguous"}
    return CONTRACT_HINTS[next(iter(kinds))] if len(kinds) == 1 and next(iter(kinds)) in CONTRACT_HINTS else hint


def evaluate_raises(check: PlannedCheck, evidence: CheckEvidence, *, hint: str) -> CheckOutcome:
    """Every call must raise an exception (not SystemExit)."""
    raised, missing = [], []
    for call in check.calls:
        got = evidence.calls.get(call.id)
        report = got.report if got else None
        if report is None:
            missing.append(f"{call.label}: no result (the process stopped)")
        elif report.status == "raised" and report.exception is not None and not report.exception.exit:
            raised.append(f"{call.label} -> {report.exception.type}")
        else:
            missing.append(f"{call.label}: did not raise")
    details = {"raised": len(raised), "calls": len(check.calls)}
    if missing:
        return CheckOutcome(name=check.name, passed=False, message="; ".join(missing) + f". Hint: {hint}",
                            details={**details, "hint": hint})
    return CheckOutcome(name=check.name, passed=True, message="raised: " + "; ".join(raised), details=details)


#: PyTorch operators that only validate the inputs (comparisons and logic whose result decides
#: whether to raise, as the references' wrappers check targets or shapes): no output value
#: comes from them, so a replay that did not reproduce the output is never blamed on them
#: (issue 38: the ignore_index bug's row named the wrapper's target check, which the
#: reference does too, instead of the kernel's mistake).
VALIDATION_OPS = frozenset({
    "eq", "ne", "lt", "le", "gt", "ge", "any", "all", "isnan", "isinf", "isfinite",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not",
    "logical_and", "logical_or", "logical_xor", "logical_not",
})


def _outside_ops(replay) -> list[str]:  # noqa: ANN001 - the harness's replay record
    """The operators a call ran outside Triton that could have produced output values."""
    return [op for op in replay.torch_ops if op not in VALIDATION_OPS]


def _replay_problem(call: PlannedCall, evidence: CheckEvidence) -> tuple[str | None, int, bool]:
    """Why replaying a recorded call did not reproduce its output (None: it did), how many
    launches the call made, and whether the replayed output was merely over the bound (within
    ``REPLAY_CLOSE_RATIO`` times the allowed error: the launches did the work)."""
    got = evidence.calls.get(call.id)
    report = got.report if got else None
    replay = report.replay if report else None
    if replay is None:
        return f"{call.label}: no record of its Triton launches came back", 0, False
    launches = replay.launches
    ops = _outside_ops(replay)
    outside = (f" The call also ran PyTorch operators outside Triton ({', '.join(ops[:6])}): "
               "work the replay does not redo." if ops else "")
    if replay.side_streams:
        outside += f" {replay.side_streams} launch(es) went to a stream other than the caller's."
    if replay.status == "not_replayable":
        return f"{call.label}: its launches cannot be replayed: {replay.message}.{outside}", launches, False
    if replay.status == "raised":
        return f"{call.label}: replaying its launches raised {replay.message}.{outside}", launches, False
    if launches == 0:
        return f"{call.label}: the call launched no @triton.jit kernel.{outside}", launches, False
    replayed = got.replay_outs()
    where = "on the call's own inputs" if _replayed_on_own_inputs(call) else "on new inputs"
    for expectation in call.replay_expectations():
        named = f" {expectation.name}" if call.outputs else ""
        out = replayed[expectation.index] if expectation.index < len(replayed) else None
        if out is None:
            reason = got.replay_error or "the replay left no output"
            return (f"{call.label}: replaying its {launches} launch(es) gave no output{named} ({reason}).{outside}",
                    launches, False)
        if tuple(out.shape) != tuple(expectation.expected.shape):
            return (f"{call.label}: the replayed output{named} has shape {tuple(out.shape)}, expected "
                    f"{tuple(expectation.expected.shape)}", launches, False)
        comparison = compare(out, expectation.expected, expectation.scale, expectation.tolerance, expectation.slack)
        if not comparison.passed:
            close = (not outside and not comparison.nan_count and comparison.max_ratio <= REPLAY_CLOSE_RATIO)
            if close:  # the launches did the work: their arithmetic is at the tolerance's edge
                return (f"{call.label}: replayed {where}, its {launches} Triton launch(es) gave the output{named} "
                        f"just over the bound ({comparison.describe()}; worst error {comparison.max_ratio:.3g} times "
                        f"the allowed one)."), launches, True
            return (f"{call.label}: replaying its {launches} Triton launch(es) {where} did not reproduce the "
                    f"output{named} ({comparison.describe()}).{outside}"), launches, False
    return None, launches, False


def _right(call: PlannedCall, got) -> bool:
    """Every output of the call's first round came back right (shape, dtype, values)."""
    found = got.outs()
    for expectation in call.expectations(0):
        out = found[expectation.index] if expectation.index < len(found) else None
        if out is None or tuple(out.shape) != tuple(expectation.expected.shape) or (
                expectation.dtype is not None and out.dtype != expectation.dtype) or not compare(
                out, expectation.expected, expectation.scale, expectation.tolerance, expectation.slack).passed:
            return False
    return True


#: Up to this many times the allowed error, a replay that did not reproduce the output is named
#: as over the bound, not as work done elsewhere: unwritten or unreplayed work is off by the
#: value itself (hundreds of times a tolerance).
REPLAY_CLOSE_RATIO = 10.0

#: The hint of a triton_kernel failure when every call not reproduced shows the same thing.
REPLAY_HINTS = {
    "close": "the Triton launches did the work, but on other inputs their result is just outside the tolerance: do the "
             "arithmetic as precisely as the tolerance assumes (fp32 accumulation, one rounding of the result)",
    "none": "these calls launched no @triton.jit kernel: write the computation as Triton kernels and launch them",
    "outside": "the work the calls did with PyTorch operators outside Triton is not replayed: do it in your "
               "@triton.jit kernels, so that their launches alone, replayed on new inputs, give the output",
    "inputs": "the Triton launches did all the work but were right only for the inputs of these calls: on new "
              "inputs of the same layout they were wrong (the value checks that fail above show on which inputs)",
}


def _replayed_on_own_inputs(call: PlannedCall) -> bool:
    """Whether the call's launches are replayed on its own bases, not on new inputs: a training
    step's (its inputs come from the trajectory) and, on a GPU, the output contract's."""
    return bool(call.replay_args) and all(a is b for a, b in zip(call.replay_args, call.args))


def evaluate_triton_kernel(check: PlannedCheck, evidence: CheckEvidence, *, recorded: list[PlannedCall],
                           hint: str) -> CheckOutcome:
    """The Triton launches alone do the work: for every recorded call whose output was right,
    its recorded launches, replayed on new inputs of the same layout (by the child under the CPU
    interpreter; by a trusted process that never imports the submission on a GPU), reproduce
    the oracle's output within the dtype's tolerance.

    An aggregate check: it has no calls of its own; ``recorded`` are the plan's calls with
    ``record_launches``. A call whose own output was wrong fails its own check and is not
    counted here, so this check fails exactly when a right answer did not come from the Triton
    launches (PyTorch did the work, or work on the side); with no right output at all it is
    skipped.
    """
    problems: list[str] = []
    kinds: set[str] = set()  # of the calls not reproduced: "none" launched, PyTorch "outside" Triton, "other"
    checked = launches_total = own = 0
    for call in recorded:
        got = evidence.calls.get(call.id)
        if got is None or got.report is None or got.report.status != "ok" or not _right(call, got):
            continue
        checked += 1
        own += _replayed_on_own_inputs(call)
        problem, launches, close = _replay_problem(call, evidence)
        launches_total += launches
        if problem:
            problems.append(problem)
            replay = got.report.replay
            kinds.add("none" if launches == 0 else "outside" if replay is not None and _outside_ops(replay)
                      else "close" if close
                      else "inputs" if replay is not None and replay.status not in ("not_replayable", "raised")
                      else "other")
    details = {"calls": checked, "launches": launches_total, "failed": len(problems)}
    if not checked:
        return CheckOutcome(name=check.name, passed=False, skipped=True, details=details,
                            message="not run: no call returned a right output, so there was nothing to reproduce "
                                    "by replaying its Triton launches")
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        hint = REPLAY_HINTS.get(next(iter(kinds)), hint) if len(kinds) == 1 else hint
        return CheckOutcome(name=check.name, passed=False, details={**details, "hint": hint},
                            message=f"{problems[0].rstrip('.')}{more}. Hint: {hint}")
    where = ("on new inputs" if not own else "on the calls' own inputs" if own == checked
             else f"on new inputs ({own} of the calls on their own inputs)")
    return CheckOutcome(name=check.name, passed=True, details=details,
                        message=f"{checked} calls: their {launches_total} recorded Triton launches, replayed {where}, "
                                "reproduced the right output")
