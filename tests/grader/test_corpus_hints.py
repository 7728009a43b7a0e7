"""The first hint of every wrong corpus file's report names that file's bug, and no other.

Each wrong file of each assignment (tests/corpus/<assignment>/wrong/) says in its docstring the
phrase its report's first hint must contain ("Expected hint: sign"), or "Expected hint: none"
where no hint can tell its bug from the values. The first hint shown is the summary's
(grader.report.document.summarize: the first failed check's hint or diagnosis). It must contain the
file's phrase and none of the other files' phrases of that assignment: a hint that names a bug
the file does not have points the student the wrong way.

The gradings are those of tests/grader/test_corpora.py (its keys and settings, in the session's
pool), so each file is graded once per session whichever module asks first.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from grading_support import (
    TESTS_DIR,
    expected_failed_from_docstring,
    expected_hint_from_docstring,
    requires_bwrap,
    skipped_checks,
    summary,
)
from test_corpora import CorpusGradings, key, selected_names
from test_corpora import settings as corpus_settings

from grader.assignments.softmax_backward import checks as softmax_checks
from grader.checks.evaluate import diagnose_coverage
from grader.checks.plan import CheckEvidence
from grader.manifest import MANIFESTS
from grader.report.document import CheckOutcome, ResultDocument, summarize
from grader.report.render import failing_input

ASSIGNMENTS = tuple(MANIFESTS)


def _wrong(name: str) -> list[Path]:
    return sorted((TESTS_DIR / "corpus" / name / "wrong").glob("*.py"))


WRONG = [(name, path) for name in ASSIGNMENTS for path in _wrong(name)]


@pytest.fixture(scope="module")
def graded(gradings, request):
    """The corpus files of the selected tests' assignments, each graded once (seed 0, CPU
    interpreter): ``-k NAME`` grades NAME's only."""
    return CorpusGradings(gradings, selected_names(request))


def _other_phrases(name: str, path: Path) -> set[str]:
    """The bug phrases of the assignment's other wrong files (a phrase the file's own phrase
    contains, or that contains it, names the same bug)."""
    own = (expected_hint_from_docstring(path) or "").lower()
    phrases = {(expected_hint_from_docstring(other) or "").lower() for other in _wrong(name) if other != path}
    return {p for p in phrases if p and not (own and (p in own or own in p))}


@pytest.mark.parametrize("name, path", [pytest.param(n, p, id=f"{n}/{p.stem}") for n, p in WRONG])
def test_every_wrong_file_names_its_bug_phrase(name: str, path: Path):
    phrase = expected_hint_from_docstring(path)
    assert phrase is None or len(phrase) >= 3, f"{path.name}: the phrase {phrase!r} is too short to name a bug"


@requires_bwrap
@pytest.mark.parametrize("name, path", [pytest.param(n, p, id=f"{n}/{p.stem}") for n, p in WRONG])
def test_the_first_hint_names_the_files_bug_and_no_other(name: str, path: Path, graded):
    document = graded.result(key(name, path))
    shown = summarize(ResultDocument.model_validate(document))
    phrase = expected_hint_from_docstring(path)
    if not expected_failed_from_docstring(path) - skipped_checks(document):
        # Its bug shows only in checks not run here (GPU-only on the CPU interpreter): no failure, no hint.
        assert shown.check is None and shown.hint is None, summary(document)
        return
    hint = (shown.hint or "").lower()
    if phrase is not None:
        assert phrase.lower() in hint, f"{shown.check}'s hint does not name {phrase!r}: {shown.hint!r}"
    named = {other for other in _other_phrases(name, path) if other in hint}
    assert not named, f"{shown.check}'s hint names {named}, bugs {path.name} does not have: {shown.hint!r}"


def _stored(gradings, name: str, stem: str) -> ResultDocument:
    """One wrong file's result document as the service stores it (JSON and back). Only that
    file is queued (under test_corpora's key and settings: a session that grades the whole
    corpus grades it once), so these tests alone cost a few gradings."""
    path = TESTS_DIR / "corpus" / name / "wrong" / f"{stem}.py"
    gradings.submit(key(name, path), path, assignment=name,
                    grader_settings=corpus_settings(child_timeout_s=900))
    document = gradings.result(key(name, path))
    return ResultDocument.model_validate_json(ResultDocument.model_validate(document).to_json())


@requires_bwrap
def test_the_ignore_index_bugs_replay_row_blames_the_kernel_not_the_wrappers_checks(gradings):
    """Issue 38: the row blamed PyTorch operators outside Triton: the wrapper's target check,
    which the reference does too. The launches did all the work; they were right only for
    calls without an ignored row."""
    stored = _stored(gradings, "softmax_cross_entropy_backward", "ignores_ignore_index")
    row = next(c for c in stored.checks if c.name == "triton_kernel")
    assert not row.passed and "outside Triton" not in row.message, row.message
    assert "right only for the inputs of these calls" in row.details["hint"]
    # A count made with PyTorch is still named as such.
    counted = _stored(gradings, "softmax_cross_entropy_backward", "n_valid_from_torch")
    row = next(c for c in counted.checks if c.name == "triton_kernel")
    assert "PyTorch operators outside Triton (sum" in row.message, row.message


@requires_bwrap
def test_the_layernorm_dw_bugs_hint_names_it(gradings):
    """Issue 38: the dw-from-x bug's hint restated the formula; it names the bug."""
    stored = _stored(gradings, "layernorm_backward", "dw_uses_x")
    assert "Your dw matches sum over rows of dy * x, the raw input" in (stored.summary.hint or "")


@requires_bwrap
def test_the_gemm_overflow_bugs_summary_shows_the_tables_nan(gradings):
    """Issue 38: the stored report's summary said `got ?` where its table said `nan`."""
    stored = _stored(gradings, "gemm_epilogue", "unstable_tanh")
    first = next(c for c in stored.checks if c.name == stored.summary.check)
    assert "got nan" in failing_input(stored.summary) and "got nan" in first.message


# ---- the diagnoses behind the hints, on made-up outputs (no child process) ------------------------
@pytest.fixture(scope="module")
def softmax_plan():
    return softmax_checks.build_plan(seed=0, device="cpu")


def _evidence(plan, fp32_passed: bool) -> CheckEvidence:
    earlier = {"autograd_fp32": CheckOutcome(name="autograd_fp32", passed=fp32_passed, message="m")}
    return CheckEvidence(calls={}, bank=plan.bank, earlier=earlier)


def _half_calls(plan):
    check = next(c for c in plan.checks if c.name == "half_precision")
    return [c for c in check.calls if plan.bank.values_of(c.args[0]).dtype == torch.float16]


def _formula(plan, call, sign: float, factor: float = 1.0) -> torch.Tensor:
    """y * (g + sign * factor * dot) of the call's inputs, in fp32, stored in their dtype."""
    y, g = plan.bank.values_of(call.args[0]), plan.bank.values_of(call.args[1])
    dot = (y.float() * g.float()).sum(dim=-1, keepdim=True)
    return (y.float() * (g.float() + sign * factor * dot)).to(y.dtype)


def test_g_plus_dot_in_fp32_is_named_as_the_sign_not_as_float16_accumulation(softmax_plan):
    # y*(g + dot) is y*(g - dot) plus a per-row offset 2*dot in the dot: the fitted-offset test of
    # fp16 accumulation alone would call it that.
    for call in _half_calls(softmax_plan):
        text = softmax_checks.diagnose(_formula(softmax_plan, call, +1), call, _evidence(softmax_plan, False))
        assert "the sign of the dot term is flipped" in text and "float16" not in text, (call.label, text)


def test_half_precision_is_not_named_for_a_formula_error_fp32_shows(softmax_plan):
    # y*(g - 1.5 dot): no known formula, an exact per-row offset in dot; autograd_fp32 fails on it.
    for call in _half_calls(softmax_plan):
        wrong = _formula(softmax_plan, call, -1, 1.5)
        assert softmax_checks.diagnose(wrong, call, _evidence(softmax_plan, False)) == "", call.label
        # The same offset with fp32 right is what the fp16 diagnosis is for.
        assert "accumulated in float16" in softmax_checks.diagnose(wrong, call, _evidence(softmax_plan, True))


def test_coverage_patterns_on_strided_inputs_are_named_as_strides():
    expected = torch.ones(4, 8, dtype=torch.float64)
    rows_off = expected.clone()
    rows_off[1:] = 5.0  # row 0 (offset 0) right, every later row read at the wrong place
    ratio = (rows_off - expected).abs() / 1e-3
    assert "grid that launches too few programs" in diagnose_coverage(rows_off, ratio > 1, expected, ratio)
    strided = diagnose_coverage(rows_off, ratio > 1, expected, ratio, strided=True)
    assert "own strides" in strided and "grid" not in strided, strided
    guards = expected.clone()
    guards[2, 3] = float("nan")
    assert "own strides" in diagnose_coverage(guards, ~(guards == expected), expected, strided=True)
    assert "unwritten" in diagnose_coverage(guards, ~(guards == expected), expected)
