"""The correct-solution corpus (tests/corpus/softmax_backward/correct/): every file passes.

The files are correct kernels written the ways students and libraries write them (STYLES
names the six the issue asks for; the folder may hold more). Each is graded once on the CPU
interpreter in the sandbox; every check that runs there must pass, and only the GPU-only
checks may be skipped. The same files are graded on the H200 by scripts/gpu_styles.py, which
records each one's grading and compile time (docs/checks.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from grading_support import CORPUS, check, requires_bwrap, settings, summary

from grader.assignments.softmax_backward.spec import CHECK_NAMES, GPU_ONLY_CHECKS

pytestmark = requires_bwrap

CORRECT_DIR = CORPUS / "correct"
FILES = sorted(CORRECT_DIR.glob("*.py"))

# The styles every correct kernel may be written in, one file each (issue 12).
STYLES = {
    "whole row in one block (Triton's fused-softmax tutorial)": "whole_row_block.py",
    "chunked loop over the row": "chunked_loop.py",
    "2-D tiles, several rows per program (@triton.heuristics)": "tiles_2d.py",
    "@triton.autotune with several configs": "autotuned.py",
    "block pointers (tl.make_block_ptr / tl.advance)": "block_pointers.py",
    "two kernels with a scratch buffer of partial dot products": "scratch_two_kernels.py",
}


def _key(path: Path) -> str:
    return f"correct/{path.name}"


@pytest.fixture(scope="module")
def correct(gradings):
    for path in FILES:
        gradings.submit(_key(path), path, grader_settings=settings(child_timeout_s=900))  # verdicts, not speed
    return gradings


def test_every_style_has_a_file():
    present = {path.name for path in FILES}
    assert set(STYLES.values()) <= present, f"missing styles: {set(STYLES.values()) - present}"


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_passes_every_check_that_runs_on_cpu(path: Path, correct):
    document = correct.result(_key(path))
    assert document["verdict"] == "passed", summary(document)
    assert document["error"] is None, summary(document)
    assert [c["name"] for c in document["checks"]] == list(CHECK_NAMES), summary(document)
    for result in document["checks"]:
        if result["name"] in GPU_ONLY_CHECKS:
            assert result["skipped"] and not result["passed"], summary(document)
        else:
            assert result["passed"] and not result["skipped"], summary(document)
            ratio = result["max_err_over_tolerance"]
            assert ratio is None or ratio <= 1.0, (result["name"], ratio)


def test_autotuned_kernel_runs_its_first_config_under_the_interpreter_and_says_so(correct):
    # Without the narrowing, every call raised "0 active drivers" (Triton 3.6's autotuner times
    # configs with the GPU driver's benchmarker, which the interpreter lacks).
    document = correct.result("correct/autotuned.py")
    assert document["verdict"] == "passed", summary(document)
    notes = [n for n in document["notes"] if "@triton.autotune kernel _vjp_autotuned: 3 configs" in n]
    assert len(notes) == 1, document["notes"]
    assert "BLOCK_N: 1024" in notes[0] and "first one" in notes[0], notes[0]
    launches = check(document, "triton_kernel")["details"]
    assert launches["launches"] == launches["calls"], launches  # one launch per call: configs were not run


def test_heuristics_kernel_needs_no_narrowing(correct):
    document = correct.result("correct/tiles_2d.py")
    assert document["verdict"] == "passed" and document["notes"] == [], summary(document)


def test_nothing_is_compiled_under_the_interpreter(correct):
    for path in FILES:
        document = correct.result(_key(path))
        assert document["timings_s"]["compile"] == 0.0, (path.name, document["timings_s"])  # nothing compiles
