"""Kernels that read memory they never wrote get the same verdict and the same failed checks on
every run, and are told so (issue #37; docs/checks.md, "Memory never written: the poison").

Each scratch-buffer file of the corpora is graded five times with the same seed.
"""

from __future__ import annotations

import pytest
from grading_support import TESTS_DIR, expected_failed_from_docstring, failed_checks, requires_bwrap, settings, summary

from grader.report.document import ResultDocument, summarize

pytestmark = requires_bwrap

RUNS = 5
SCRATCH_FILES = [
    ("gemm_epilogue", TESTS_DIR / "corpus" / "gemm_epilogue" / "wrong" / "split_k_scratch_unwritten.py"),
    ("layernorm_backward", TESTS_DIR / "corpus" / "layernorm_backward" / "wrong" / "scratch_not_zeroed.py"),
]


@pytest.mark.parametrize("assignment, path", [pytest.param(a, p, id=p.stem) for a, p in SCRATCH_FILES])
def test_a_scratch_buffer_file_fails_the_same_checks_every_run(assignment, path, gradings):
    futures = [gradings.submit(f"poison/{path.name}/{run}", path, assignment=assignment, grader_settings=settings())
               for run in range(RUNS)]
    documents = [future.result(timeout=900) for future in futures]
    expected = expected_failed_from_docstring(path)
    for document in documents:
        assert document["verdict"] == "failed" and failed_checks(document) == expected, summary(document)
        shown = summarize(ResultDocument.model_validate(document))
        assert "accumulated into or returned memory that was never written" in (shown.hint or ""), shown.hint
    messages = [[c["message"] for c in document["checks"]] for document in documents]
    assert all(m == messages[0] for m in messages), "the same messages, numbers included, on every run"
