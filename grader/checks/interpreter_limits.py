"""What the CPU interpreter cannot judge, as the parent reads it from the evidence.

The check child's interpreter patches (grader/harness/interpreter_compat.py) evaluate libdevice
math on the CPU; a libdevice function they do not evaluate raises ``LibdeviceUnavailable`` with
a message that names it and holds ``UNAVAILABLE_MARK``. A check whose calls raised so was not
run on the CPU: it is reported as skipped with that sentence, never as a failure of the
student's arithmetic (docs/checks.md, "What the CPU cannot judge"). On a GPU the mark never
appears (the compiler links libdevice itself).
"""

from __future__ import annotations

import re

from grader.checks.plan import CheckEvidence, PlannedCheck
from grader.harness.interpreter_compat import UNAVAILABLE_MARK
from grader.report.document import CheckOutcome

_NAME = re.compile(r"(libdevice\.\w+) " + re.escape(UNAVAILABLE_MARK))


def unavailable_function(evidence: CheckEvidence, check: PlannedCheck) -> str | None:
    """``libdevice.X`` when a call of ``check`` (or, for a check without calls of its own such
    as triton_kernel, any call or replay of the run) stopped on a libdevice function the
    interpreter does not evaluate; else None."""
    if check.calls:
        rounds = [evidence.calls.get(round_id) for call in check.calls for round_id in call.round_ids]
    else:
        rounds = list(evidence.calls.values())
    for got in rounds:
        if got is None:
            continue
        texts = [got.replay_error or ""]
        if got.report is not None and got.report.exception is not None:
            texts.append(got.report.exception.message or "")
        if got.report is not None and got.report.replay is not None:
            texts.append(getattr(got.report.replay, "message", None) or "")
        for text in texts:
            found = _NAME.search(text)
            if found:
                return found.group(1)
    return None


def not_run_on_cpu(check: PlannedCheck, evidence: CheckEvidence, outcome: CheckOutcome) -> CheckOutcome:
    """``outcome`` as it stands, or, when it failed because the interpreter could not evaluate
    a libdevice function, the check as not run (skipped) with the function named."""
    if outcome.passed or outcome.skipped:
        return outcome
    name = unavailable_function(evidence, check)
    if name is None:
        return outcome
    return CheckOutcome(name=check.name, passed=False, skipped=True,
                        message=f"not run on the CPU: {name} {UNAVAILABLE_MARK}",
                        details={"cpu_cannot_judge": name})


def cpu_cannot_judge_notes(outcomes: list[CheckOutcome]) -> list[str]:
    """One note for the checks not run for a libdevice function, so that a verdict of the CPU
    interpreter never reads as if they had passed."""
    names = [o.name for o in outcomes if o.skipped and (o.details or {}).get("cpu_cannot_judge")]
    if not names:
        return []
    functions = sorted({o.details["cpu_cannot_judge"] for o in outcomes if o.name in names})
    return [f"{len(names)} checks ({', '.join(names)}) were not run: the CPU interpreter does not evaluate "
            f"{', '.join(functions)}; a GPU grading runs them (docs/checks.md, \"What the CPU cannot judge\")."]
