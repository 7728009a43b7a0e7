"""The verdict rules of one grading: every check's outcome from the evidence, then the verdict.

``evaluate_checks`` turns the evidence the children sent back (grader/evidence/reader.py) into each
check's ``CheckOutcome``, in plan order; ``decide_verdict`` says passed, failed or error from
those outcomes and the run's error. The parent decides both; nothing here runs submission code.
"""

from __future__ import annotations

from grader.checks.interpreter_limits import not_run_on_cpu
from grader.checks.plan import CheckEvidence, Plan
from grader.report.document import (
    CheckOutcome,
    ErrorKind,
    GradingError,
    Verdict,
)


def evaluate_checks(plan: Plan, evidence: CheckEvidence, finished: set[str], run_error: GradingError | None,
                     *, previous: list[CheckOutcome] | None = None, stopped_early: str | None = None
                     ) -> list[CheckOutcome]:
    """Every check's outcome, in plan order; checks whose step never finished are listed as not
    run, skipped checks with their reason. Each check's evaluate sees the outcomes before it
    (``evidence.earlier``). With ``previous``, only the aggregate checks (no calls of their own:
    they read the whole run, e.g. the replayed outputs) and the checks that read the trusted
    replay's evidence of their own calls (``reads_replay``) are evaluated again; the others keep
    their outcome.

    ``stopped_early``: the run was stopped after a check failed (fail fast,
    grader.children.check_children.FailFastWatch); the checks it did not reach, and the aggregate checks (which
    need the whole run), are not run with this message. Should no check have failed after all
    (a report the submission forged to look failed), those checks fail instead: a run stopped
    early never passes."""
    outcomes: list[CheckOutcome] = []
    for index, check in enumerate(plan.checks):
        if previous is not None and check.calls and not check.reads_replay:
            outcome = previous[index]
        elif check.skip_reason is not None:
            outcome = CheckOutcome(name=check.name, passed=False, skipped=True, message=check.skip_reason)
        elif stopped_early is not None and (not check.calls or check.name not in finished):
            outcome = CheckOutcome(name=check.name, passed=False, skipped=True, message=stopped_early)
        elif (check.calls and check.name not in finished) or (not check.calls and run_error is not None):
            # Never ran (or, for aggregate checks such as triton_kernel, needs the whole run):
            # listed so that the table shows how far the run got; the error says why.
            outcome = CheckOutcome(name=check.name, passed=False, skipped=True,
                                   message="not run: the run ended with the error below")
        else:
            try:
                outcome = not_run_on_cpu(check, evidence, check.evaluate(check, evidence))
            except Exception as exc:  # noqa: BLE001 - odd outputs must not crash the parent
                outcome = CheckOutcome(name=check.name, passed=False,
                                       message=f"could not evaluate the output: {type(exc).__name__}: {exc}")
        outcomes.append(outcome)
        evidence.earlier[check.name] = outcome
    if stopped_early is not None and not any(not o.passed and not o.skipped for o in outcomes):
        outcomes = [o.model_copy(update={"skipped": False, "message": o.message + " (and no check failed: a run"
                                         " stopped early cannot pass)"}) if o.message == stopped_early else o
                    for o in outcomes]
    return outcomes


#: Errors that end the run at a known call, after which nothing ran: checks that failed before
#: such an error are real failures, so the verdict stays ``failed`` (the error beside them).
#: Not resource_limit: a fork bomb's refused forks make the calls after it fail too.
RUN_ENDING_ERRORS = (ErrorKind.TIMEOUT, ErrorKind.CRASH, ErrorKind.EXITED)


def decide_verdict(outcomes: list[CheckOutcome], error: GradingError | None, expected_checks: int, *,
             failures_before_error: bool = False) -> Verdict:
    """``failed`` when a check failed, also when the run then ended with an error if
    ``failures_before_error`` (the error is reported beside the failures); else ``error`` when
    the run ended early; else ``passed`` when every check passed or was skipped and at least
    one passed."""
    failed = any(not o.passed and not o.skipped for o in outcomes)
    if failed and (error is None or failures_before_error):
        return Verdict.FAILED
    if error is not None:
        return Verdict.ERROR
    if len(outcomes) == expected_checks and all(o.passed or o.skipped for o in outcomes) and any(o.passed for o in outcomes):
        return Verdict.PASSED
    return Verdict.FAILED


#: Seconds allowed to the replay process for its start-up (Python, torch, the CUDA context) and
