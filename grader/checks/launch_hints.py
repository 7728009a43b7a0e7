"""Hints from what a call launched, as its report says (held to the evidence: issue #37).

A wrong output from a call that ran no Triton launch, or launches of 0 programs, is not a
formula or precision mistake: its output is whatever the wrapper allocated. The child counts
each call's launches and the programs they ran (harness/launches.py ``count_programs``); the
parent names the cause from those numbers (they decide no verdict).
"""

from __future__ import annotations

from grader.harness.protocol import CallReport


def diagnose_launches(report: CallReport | None, *, refilled: bool = False) -> str:
    """A sentence when the call launched nothing, or launched empty grids; else "".
    ``refilled``: the call is a later round on the same buffers refilled with new values (a
    call without a launch there returned an answer kept from an earlier round)."""
    if report is None or report.status != "ok":
        return ""
    if report.launches == 0 and refilled:
        return (" No Triton launch ran in this call on the same buffers refilled with new values: an answer cached from"
                " an earlier call came back (the same pointers and shape do not mean the same values): compute on"
                " every call.")
    if report.launches == 0:
        return (" No Triton launch ran in this call: the output is what the wrapper allocated (a launch skipped by a"
                " condition, or a return before it).")
    if report.empty_launches:
        some = ("Its" if report.empty_launches == report.launches
                else f"{report.empty_launches} of its")
        return (f" {some} {report.launches} Triton launch(es) ran 0 programs: a grid computed with // is 0 when a size"
                f" is below the block; use triton.cdiv(size, BLOCK).")
    return ""
