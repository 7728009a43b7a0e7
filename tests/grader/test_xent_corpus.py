"""``softmax_cross_entropy_backward`` graded for real: the course reference, the correct corpus,
the starter template and the wrong corpus, each in the sandboxed child on the CPU interpreter.

Every wrong file (tests/corpus/softmax_cross_entropy_backward/wrong/) is a complete, plausible
Triton submission with one known mistake; its docstring says which checks it must fail
("Expected failed checks: ..."); the test asserts that exact set failed and that every other
check ran and passed. The reference and the correct files must pass every check, well inside
the tolerances.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from grading_support import (
    TESTS_DIR,
    check,
    expected_failed_from_docstring,
    failed_checks,
    passed_checks,
    requires_bwrap,
    summary,
)

from grader.assignments import get_assignment
from grader.assignments.softmax_cross_entropy_backward.spec import CHECK_NAMES
from grader.contract import ResultDocument

pytestmark = requires_bwrap

ASSIGNMENT = "softmax_cross_entropy_backward"
CORPUS = TESTS_DIR / "corpus" / ASSIGNMENT
SPEC = get_assignment(ASSIGNMENT)
REFERENCE = SPEC.reference_file
TEMPLATE = SPEC.template_file
WRONG = sorted((CORPUS / "wrong").glob("*.py"))
CORRECT = sorted((CORPUS / "correct").glob("*.py"))

# One file per known mistake (issue 13's list, then other common ones).
MISTAKES = {
    "softmax without the max subtraction (unstable)": "unstable_softmax.py",
    "forgetting the mean's 1/n_valid": "forgot_mean.py",
    "flipped sign (y - p)": "flipped_sign.py",
    "softmax over the wrong axis (dim 0)": "wrong_axis.py",
    "ignoring ignore_index": "ignores_ignore_index.py",
    "mean over all M rows instead of n_valid": "mean_over_all_rows.py",
    "upstream gradient dropped": "forgot_upstream_grad.py",
    "online softmax without rescaling the running sum": "online_no_rescale.py",
    "targets read as contiguous": "ignores_target_stride.py",
    "no check of out-of-range targets": "no_target_check.py",
    "no requires_grad rejection": "no_requires_grad_check.py",
    "pure PyTorch": "pure_pytorch.py",
    "n_valid counted by PyTorch outside the Triton launches": "n_valid_from_torch.py",
    "the output allocated with torch.empty_like(x) (x's strides when x is transposed)": "empty_like_output.py",
}

# The sentence the value checks add when the output matches a common mistake: file -> (check, fragment).
DIAGNOSES = {
    "flipped_sign.py": ("example_three_class", "the sign is flipped"),
    "forgot_mean.py": ("example_three_class", "without the division by n_valid"),
    "wrong_axis.py": ("autograd_fp32", "a softmax over dim 0"),
    "forgot_upstream_grad.py": ("autograd_fp32", "the upstream gradient grad is missing"),
    "ignores_ignore_index.py": ("ignore_index", "ignore_index is not honoured"),
    "mean_over_all_rows.py": ("ignore_index", "divides by every row (M) instead of n_valid"),
}


def _key(path: Path) -> str:
    return f"{ASSIGNMENT}/{path.parent.name}/{path.name}"


@pytest.fixture(scope="module")
def graded(gradings):
    """Every file of this module, graded once (seed 0, CPU interpreter), two at a time."""
    for path in [REFERENCE, *CORRECT, TEMPLATE, *WRONG]:
        gradings.submit(_key(path), path, assignment=ASSIGNMENT)
    return gradings


# ---- the reference, the correct corpus and the template ---------------------------------------
def test_reference_passes_every_check_well_inside_the_tolerances(graded):
    document = graded.result(_key(REFERENCE))
    assert document["verdict"] == "passed" and document["error"] is None, summary(document)
    assert document["assignment"] == ASSIGNMENT
    assert [c["name"] for c in document["checks"]] == list(CHECK_NAMES)
    assert all(c["passed"] and not c["skipped"] for c in document["checks"]), summary(document)
    for c in document["checks"]:
        if c["max_err_over_tolerance"] is not None:
            # fp16/bf16 outputs sit at ~0.5: rounding the result takes half an ulp of the ulp allowed
            assert c["max_err_over_tolerance"] < 0.6, c
    assert ResultDocument.model_validate(document).exit_code == 0
    assert document["log"]["total_bytes"] < 4096, document["log"]  # a clean run prints (almost) nothing


def test_reference_runs_few_interpreter_programs_per_call():
    """What keeps the reference's CPU grading fast (about 15 s on an idle 2-core machine,
    about the same as softmax_backward's): under the interpreter each program is a numpy call
    per block, so every call of the plan launches one counting program and at most two row
    programs. (Wall-clock limits are not asserted: the test machine is shared.)"""
    import torch

    from grader.assignments.softmax_cross_entropy_backward import reference as ref

    plan = SPEC.build_plan(seed=0, device="cpu")
    for check_ in plan.checks:
        for call in check_.calls:
            if call.expect != "output":
                continue
            m, c = call.args[0].size
            launch = ref._plan(m, c, 4, torch.device("cpu"))
            programs = -(-m // launch["ROWS"]) if launch["kind"] == "rows" else m
            assert launch["kind"] == "rows" and programs <= 2, (call.id, launch)
            assert -(-m // min(1 << (m - 1).bit_length(), 1 << 16)) == 1, call.id  # one counting program


@pytest.mark.parametrize("path", CORRECT, ids=[p.stem for p in CORRECT])
def test_correct_files_pass_every_check(path: Path, graded):
    document = graded.result(_key(path))
    assert document["verdict"] == "passed" and document["error"] is None, summary(document)
    assert passed_checks(document) == set(CHECK_NAMES), summary(document)


def test_the_correct_corpus_has_two_styles():
    assert {p.name for p in CORRECT} >= {"online_rowloop.py", "three_pass_lse.py"}


def test_the_starter_template_runs_and_fails_only_what_it_leaves_to_do(graded):
    document = graded.result(_key(TEMPLATE))
    assert document["verdict"] == "failed" and document["error"] is None, summary(document)
    # Its wrapper already validates and launches the kernels; the kernel bodies and the target
    # check are the student's work. Its outputs are whatever torch.empty held: where that
    # happens to be right (0 for C = 1), the replay, on NaN-filled memory, is not.
    assert {"rejects_mismatch", "rejects_requires_grad", "output_contract"} <= passed_checks(document)
    assert {"example_three_class", "autograd_fp32", "rejects_out_of_range_targets"} <= failed_checks(document)
    assert not check(document, "triton_kernel")["passed"], summary(document)


# ---- the wrong corpus -------------------------------------------------------------------------
def test_every_mistake_has_a_file():
    present = {path.name for path in WRONG}
    assert set(MISTAKES.values()) == present, (set(MISTAKES.values()) ^ present)


@pytest.mark.parametrize("path", WRONG, ids=[p.stem for p in WRONG])
def test_docstring_names_only_real_checks(path: Path):
    expected = expected_failed_from_docstring(path)
    assert expected, f"{path.name} must fail at least one check"
    assert expected <= set(CHECK_NAMES), f"unknown check names: {expected - set(CHECK_NAMES)}"


@pytest.mark.parametrize("path", WRONG, ids=[p.stem for p in WRONG])
def test_wrong_file_fails_exactly_the_expected_checks(path: Path, graded):
    document = graded.result(_key(path))
    expected = expected_failed_from_docstring(path)
    assert document["error"] is None, summary(document)
    assert [c["name"] for c in document["checks"]] == list(CHECK_NAMES), "every check must run, in order"
    # triton_kernel is not run where no value check passed: nothing right was left to replay.
    skipped = {c["name"] for c in document["checks"] if c["skipped"]}
    assert skipped <= {"triton_kernel"}, summary(document)
    assert failed_checks(document) == expected, summary(document)
    assert passed_checks(document) == set(CHECK_NAMES) - expected - skipped, summary(document)
    assert document["verdict"] == "failed", summary(document)


@pytest.mark.parametrize("name", sorted(DIAGNOSES))
def test_value_failure_names_the_mistake(name: str, graded):
    check_name, fragment = DIAGNOSES[name]
    message = check(graded.result(f"{ASSIGNMENT}/wrong/{name}"), check_name)["message"]
    assert "Your output matches" in message and fragment in message, message
    assert "Hint:" not in message.split("(+")[0], message  # the named cause replaces the generic hint


def test_unstable_softmax_shows_nan_from_finite_logits(graded):
    message = check(graded.result(f"{ASSIGNMENT}/wrong/unstable_softmax.py"), "stability_large_logits")["message"]
    assert "NaN" in message and "logits at +-1e4" in message, message


def test_row_sum_failure_says_the_row_was_ignored(graded):
    message = check(graded.result(f"{ASSIGNMENT}/wrong/ignores_ignore_index.py"), "row_sum_invariant")["message"]
    assert "(ignored) of dx sums to" in message, message


def test_missing_target_check_is_reported_per_target(graded):
    message = check(graded.result(f"{ASSIGNMENT}/wrong/no_target_check.py"), "rejects_out_of_range_targets")["message"]
    for case in ("t = [0, 3, 8, 7] with C = 8: did not raise", "t = [0, -1, 3, 7]", "with ignore_index=-1"):
        assert case in message, message


def test_pure_pytorch_launches_no_kernel(graded):
    kernel = check(graded.result(f"{ASSIGNMENT}/wrong/pure_pytorch.py"), "triton_kernel")
    assert kernel["details"]["failed"] == kernel["details"]["calls"] > 0 and kernel["details"]["launches"] == 0, kernel
    assert "launched no @triton.jit kernel" in kernel["message"], kernel


def test_count_outside_triton_is_caught_by_the_replay(graded):
    kernel = check(graded.result(f"{ASSIGNMENT}/wrong/n_valid_from_torch.py"), "triton_kernel")
    assert "did not reproduce the output" in kernel["message"], kernel
    assert "PyTorch operators outside Triton" in kernel["message"], kernel
    assert kernel["details"]["launches"] > 0, kernel


def test_reference_launches_replay_on_new_targets_and_grad(graded):
    kernel = check(graded.result(_key(REFERENCE)), "triton_kernel")
    # two launches per value call: the target count and the row kernel
    assert kernel["passed"] and kernel["details"]["launches"] == 2 * kernel["details"]["calls"], kernel


# ---- the command line, as the lead runs it on the GPU (here on the CPU, another seed) ------------
def test_cli_grades_the_reference_with_another_seed(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET" and not k.startswith("GRADER_")}
    env["GRADER_SANDBOX"] = "bwrap"
    env["PYTHONPATH"] = str(TESTS_DIR.parent) + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "grader", "check", str(REFERENCE), "--assignment", ASSIGNMENT, "--device", "cpu",
         "--json", "-", "--seed", "7"],
        check=False, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    document = json.loads(proc.stdout)
    assert document["seed"] == 7 and document["assignment"] == ASSIGNMENT
    assert all(c["passed"] for c in document["checks"]), summary(document)
