"""The training-step check (grader.checks.generic ``_TrainingStep``) on
softmax_cross_entropy_backward's spiral classifier, with the evidence made here (no child):
right outputs pass; a NaN at one step fails naming that step and the loss; a gradient 5% too
large passes no unit bound of dx and parts the trajectory, named with both losses. CPU, ~1 s.
The same check on real kernels: tests/corpus/softmax_cross_entropy_backward (every correct file
passes it; nan_on_training_batch.py, exact on every unit input, fails it alone)."""

from __future__ import annotations

import math

import torch
from test_generic_checks import _evidence

from grader.assignments.protocol import TrainingStep, TritonKernel
from grader.assignments.softmax_cross_entropy_backward import DECLARED
from grader.assignments.softmax_cross_entropy_backward.training import STEPS, problem
from grader.checks.generic import PlanBuilder
from grader.checks.plan import CheckEvidence, Plan
from grader.harness.protocol import ReplayReport


def _check():
    plan = Plan(seed=0, device="cpu")
    check = PlanBuilder(DECLARED, plan).build(TrainingStep("training_step", problem))
    plan.checks.append(check)
    return plan, check


def test_the_reference_gradients_follow_the_reference_and_the_loss_falls():
    plan, check = _check()
    assert len(check.calls) == STEPS and [call.args[0].size for call in check.calls[:1]] == [[300, 3]]
    outcome = check.evaluate(check, CheckEvidence(calls=_evidence(plan), bank=plan.bank))
    assert outcome.passed, outcome.message
    before, after = (float(x) for x in outcome.message.split("loss ")[1].split(",")[0].split(" -> "))
    assert math.isclose(before, math.log(3), rel_tol=0.02) and after < before - 0.2, outcome.message


def test_a_nan_at_one_step_fails_with_that_step_and_the_loss():
    plan, check = _check()

    def nan_at_step_5(call, outs):
        if call.id.endswith("/5"):
            bad = outs[0].clone()
            bad[299, 1] = float("nan")
            return [bad]
        return outs

    outcome = check.evaluate(check, CheckEvidence(calls=_evidence(plan, nan_at_step_5), bank=plan.bank))
    assert not outcome.passed and outcome.message.startswith(f"step 5 of {STEPS} (step 5 of the two-layer"), outcome
    assert "dx 1 elements" in outcome.message and "the loss was" in outcome.message


def test_a_gradient_five_percent_too_large_parts_the_trajectory():
    plan, check = _check()

    def too_large(call, outs):
        return [outs[0] * 1.05]

    outcome = check.evaluate(check, CheckEvidence(calls=_evidence(plan, too_large), bank=plan.bank))
    assert not outcome.passed and "with your outputs" in outcome.message and "fp64 reference" in outcome.message
    step = int(outcome.message.split()[1])
    assert step < STEPS and outcome.max_err_over_tolerance > 1
    assert torch.isfinite(torch.tensor(outcome.max_err_over_tolerance))


def test_one_wrong_element_the_loss_cannot_feel_still_fails_the_step():
    """One element at 20x its allowed error moves the loss far less than every element at the
    edge of its tolerance (the bound): the trajectory holds, the step's values do not (a kernel
    wrong where the loss does not look passed before; it was not replayed by triton_kernel
    either, which counts only right outputs)."""
    plan, check = _check()

    def one_element_off(call, outs):
        if not call.id.endswith("/3"):
            return outs
        [expectation] = call.expectations(0)
        allowed = expectation.tolerance.allowed(expectation.expected, expectation.scale, expectation.slack)
        bad = outs[0].clone()
        bad[7, 2] += 20 * float(allowed[7, 2])
        return [bad]

    outcome = check.evaluate(check, CheckEvidence(calls=_evidence(plan, one_element_off), bank=plan.bank))
    assert not outcome.passed, outcome.message
    assert outcome.message.startswith("the loss stayed within its bound at every step, but "), outcome.message
    assert "step 3 of the two-layer" in outcome.message and 15 < outcome.max_err_over_tolerance < 25


def test_the_training_calls_are_replayed_on_their_own_inputs_by_triton_kernel():
    """The training batches are in the replay of the Triton launches, on the very inputs of each
    call: left out, they were the one place PyTorch could answer unseen (corpus
    attention_backward/wrong/training_batch_in_pytorch.py passed every check)."""
    plan, check = _check()
    replayed = PlanBuilder(DECLARED, plan).build(TritonKernel())
    plan.checks.append(replayed)
    assert all(call.record_launches and all(a is b for a, b in zip(call.replay_args, call.args))
               for call in check.calls)
    calls = _evidence(plan)
    for call in check.calls:  # what a call answered by PyTorch records: no launch, torch operators
        calls[call.id].report.replay = ReplayReport(status="replayed", launches=0, torch_ops=["_softmax", "sub"])
    evidence = CheckEvidence(calls=calls, bank=plan.bank, earlier={check.name: check.evaluate(
        check, CheckEvidence(calls=calls, bank=plan.bank))})
    outcome = replayed.evaluate(replayed, evidence)
    assert not outcome.passed and outcome.message.startswith("step 0 of the two-layer"), outcome.message
    assert "launched no @triton.jit kernel" in outcome.message and outcome.details["failed"] == STEPS
