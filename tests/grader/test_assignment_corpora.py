"""``gemm_epilogue`` and ``layernorm_backward`` graded for real: the course reference, the starter
template, the correct corpus and the wrong corpus, each in the sandboxed child on the CPU
interpreter, one module parametrised over both (their checks are the generic ones).

Every wrong file is a complete, plausible Triton submission with one known mistake; its
docstring says which checks it must fail ("Expected failed checks: ..."); the test asserts
that exact set failed and every other check passed, or was skipped: the GPU-only checks
(gemm_epilogue's bfloat16_values: Triton 3.6's interpreter cannot run a bf16 tl.dot), and
triton_kernel when no right output was left to replay.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from grading_support import (
    TESTS_DIR,
    check,
    expected_failed_from_docstring,
    failed_checks,
    passed_checks,
    requires_bwrap,
    settings,
    skipped_checks,
    summary,
)

from grader.assignments import get_assignment

pytestmark = requires_bwrap

NAMES = ("gemm_epilogue", "layernorm_backward")
#: The styles each correct corpus must have (one of them the Triton tutorial's for the op).
STYLES = {
    "gemm_epilogue": {"tutorial_grouped.py", "block_pointers.py", "split_k_two_kernels.py"},
    "layernorm_backward": {"tutorial_locks.py", "atomics.py", "column_pass.py"},
}

#: The sentence a failing value check adds when the output matches a common mistake:
#: (assignment, file) -> (check, fragment).
DIAGNOSES = {
    ("gemm_epilogue", "gelu_erf.py"): ("example_small", "the erf GELU"),
    ("gemm_epilogue", "gelu_before_bias.py"): ("example_small", "the bias was added after GELU"),
    ("gemm_epilogue", "bias_on_rows.py"): ("float16_values", "the bias added along rows"),
    ("layernorm_backward", "missing_xhat_term.py"): ("autograd_fp32", "the xhat * c1 term of dx is missing"),
    ("layernorm_backward", "missing_mean_term.py"): ("autograd_fp32", "the c2 = mean_j(w*dy) term of dx is missing"),
    ("layernorm_backward", "divides_by_rstd.py"): ("autograd_fp32", "rstd was used as the standard deviation"),
}


def _files(name: str, folder: str) -> list[Path]:
    return sorted((TESTS_DIR / "corpus" / name / folder).glob("*.py"))


def _params(folder: str):
    return [pytest.param(name, path, id=f"{name}/{path.stem}") for name in NAMES for path in _files(name, folder)]


def _key(name: str, path: Path) -> str:
    return f"{name}/{path.parent.name}/{path.name}"


@pytest.fixture(scope="module")
def graded(gradings):
    """Every file of both assignments, graded once (seed 0, CPU interpreter), two at a time."""
    for name in NAMES:
        assignment = get_assignment(name)
        for path in [assignment.reference_file, assignment.template_file, *_files(name, "correct"),
                     *_files(name, "wrong")]:
            gradings.submit(_key(name, path), path, assignment=name, grader_settings=settings(child_timeout_s=900))
    return gradings


def _allowed_skips(name: str) -> set[str]:
    return {"triton_kernel", *getattr(get_assignment(name), "gpu_only_checks", ())}


@pytest.mark.parametrize("name", NAMES)
def test_reference_passes_every_check_well_inside_the_tolerances(name, graded):
    assignment = get_assignment(name)
    document = graded.result(_key(name, assignment.reference_file))
    assert document["verdict"] == "passed" and document["error"] is None, summary(document)
    assert [c["name"] for c in document["checks"]] == list(assignment.check_names)
    assert skipped_checks(document) == set(getattr(assignment, "gpu_only_checks", ())), summary(document)
    for c in document["checks"]:
        if c["max_err_over_tolerance"] is not None:
            assert c["max_err_over_tolerance"] < 0.6, c  # half an ulp of the one allowed for the result


@pytest.mark.parametrize("name", NAMES)
def test_the_starter_template_fails(name, graded):
    assignment = get_assignment(name)
    document = graded.result(_key(name, assignment.template_file))
    assert document["verdict"] == "failed" and document["error"] is None, summary(document)
    assert {"rejects_mismatch", "rejects_requires_grad"} <= passed_checks(document), summary(document)


@pytest.mark.parametrize("name", NAMES)
def test_the_correct_corpus_has_its_styles(name):
    assert {p.name for p in _files(name, "correct")} >= STYLES[name]
    assert len(_files(name, "wrong")) >= 8


@pytest.mark.parametrize("name, path", _params("correct"))
def test_correct_files_pass(name, path, graded):
    document = graded.result(_key(name, path))
    assert document["verdict"] == "passed" and document["error"] is None, summary(document)
    assert skipped_checks(document) <= _allowed_skips(name), summary(document)


@pytest.mark.parametrize("name, path", _params("wrong"))
def test_wrong_files_fail_exactly_the_expected_checks(name, path, graded):
    document = graded.result(_key(name, path))
    expected = expected_failed_from_docstring(path)
    assert document["error"] is None, summary(document)
    assert failed_checks(document) == expected, summary(document)
    assert skipped_checks(document) <= _allowed_skips(name), summary(document)
    assert document["verdict"] == "failed"


@pytest.mark.parametrize("name, file", sorted(DIAGNOSES), ids=[f"{n}/{f}" for n, f in sorted(DIAGNOSES)])
def test_a_value_failure_names_the_mistake(name, file, graded):
    check_name, fragment = DIAGNOSES[(name, file)]
    document = graded.result(_key(name, TESTS_DIR / "corpus" / name / "wrong" / file))
    assert fragment in check(document, check_name)["message"], summary(document)
