"""attention_backward's float16_values sees inputs with every bit of float16, not only the 2^-5
grid: on the grid alone (7 significant bits, exact in bfloat16), a kernel that keeps its inputs
to bfloat16's 8 bits (tests/corpus/attention_backward/wrong/inputs_through_bf16.py) was exact
on every case and passed every check. Its outputs are emulated here in fp64 on the plan's own
inputs (no child). CPU, a few seconds."""

from __future__ import annotations

import torch
from test_generic_checks import _evidence

from grader.assignments.attention_backward import ASSIGNMENT, _dq
from grader.assignments.attention_backward.oracle import backward_fp64
from grader.checks.plan import CheckEvidence


def _bf16(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.bfloat16).double()


def _inputs_kept_to_bf16_bits(call, outs):
    """dq, dk, dv of q, k, v and dout rounded to bfloat16 (dq with the given lse and out, as a
    kernel computes it), in the call's dtype."""
    placed = call.extra["placed"]
    q, k, v, dout = (_bf16(placed[name]) for name in ("q", "k", "v", "dout"))
    lse, out = placed["lse"].double(), placed["out"].double()
    grads = backward_fp64(q, k, v, out, dout, lse)
    dq = _dq(q, k, v, dout, lse, out)
    return [t.to(o.dtype) for t, o in zip((dq, grads["dk"][0], grads["dv"][0]), outs)]


def test_inputs_kept_to_bfloat16_bits_fail_float16_values_and_are_named():
    plan = ASSIGNMENT.build_plan(seed=0, device="cpu")
    check = next(c for c in plan.checks if c.name == "float16_values")
    assert any(not bool((c.extra["placed"]["q"].double() == _bf16(c.extra["placed"]["q"])).all())
               for c in check.calls), "no float16_values case has inputs off bfloat16's bits"
    evidence = CheckEvidence(calls=_evidence(plan, _inputs_kept_to_bf16_bits), bank=plan.bank)
    outcome = check.evaluate(check, evidence)
    assert not outcome.passed and outcome.max_err_over_tolerance > 1.5, outcome.message
    assert "full-precision inputs" in outcome.message and "8 significant bits" in outcome.message, outcome.message


def test_a_right_kernel_passes_the_full_precision_case():
    plan = ASSIGNMENT.build_plan(seed=0, device="cpu")
    check = next(c for c in plan.checks if c.name == "float16_values")
    outcome = check.evaluate(check, CheckEvidence(calls=_evidence(plan), bank=plan.bank))
    assert outcome.passed, outcome.message
