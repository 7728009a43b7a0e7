"""The large_offsets machinery on the CPU interpreter, at a small size.

large_offsets runs only on a GPU ((65545, 32768) float16 tensors). Its parts do not depend on
the size: inputs tiled from a few pattern rows and built in the child before the submission is
imported, only sampled output rows sent back, and a child process of its own that runs after
every other check, so that a crash there keeps every earlier verdict. Here the check is made
small ((70, 64), sampled rows around row 64, which plays the part of the first row past 2^31
elements) and run on the CPU interpreter through the real runner and sandbox.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from grading_support import REFERENCE, requires_bwrap, settings, strict_json, summary

import grader.assignments.softmax_backward.checks as checks
from grader.runner import grade_file

pytestmark = requires_bwrap

SMALL_SHAPE = (70, 64)
SMALL_SAMPLE_ROWS = (0, 1, 62, 63, 64, 65, 69)

CRASH_ON_LARGE = '''
import os, signal
import torch
import triton
import triton.language as tl


@triton.jit
def _bwd(y_ptr, g_ptr, dx_ptr, N, sym, syn, sgm, sgn, sdm, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    m = cols < N
    y = tl.load(y_ptr + row * sym + cols * syn, mask=m, other=0.0).to(tl.float32)
    g = tl.load(g_ptr + row * sgm + cols * sgn, mask=m, other=0.0).to(tl.float32)
    dot = tl.sum(y * g, axis=0)
    tl.store(dx_ptr + row * sdm + cols, (y * (g - dot)).to(dx_ptr.dtype.element_ty), mask=m)


def softmax_backward(y, g):
    if y.shape != g.shape:
        raise ValueError("shape")
    if y.dtype != g.dtype:
        raise TypeError("dtype")
    if y.device != g.device:
        raise ValueError("device")
    if y.requires_grad or g.requires_grad:
        raise ValueError("grad")
    if tuple(y.shape) == (70, 64):
        {action}
    m, n = y.shape
    dx = torch.empty((m, n), dtype=y.dtype, device=y.device)
    _bwd[(m,)](y, g, dx, n, y.stride(0), y.stride(1), g.stride(0), g.stride(1), dx.stride(0),
               BLOCK=triton.next_power_of_2(n))
    {after}
    return dx
'''


@pytest.fixture()
def small_large_offsets(monkeypatch):
    """large_offsets at (70, 64) on the CPU, row 64 standing for the first row past 2^31."""
    monkeypatch.setattr(checks, "LARGE_OFFSET_SHAPE", SMALL_SHAPE)
    monkeypatch.setattr(checks, "LARGE_OFFSET_SAMPLE_ROWS", SMALL_SAMPLE_ROWS)
    monkeypatch.setattr(checks, "LARGE_OFFSET_FIRST_ROW_PAST", 64)
    monkeypatch.setattr(checks, "_large_offsets_skip_reason", lambda device: None)


def _grade(path: Path) -> dict:
    document = grade_file(path, assignment="softmax_backward", device="cpu", seed=0, settings=settings())
    return strict_json(document.to_json())


def _check(document: dict, name: str) -> dict:
    return next(c for c in document["checks"] if c["name"] == name)


def test_reference_passes_the_tiled_isolated_check(small_large_offsets):
    document = _grade(REFERENCE)
    large = _check(document, "large_offsets")
    assert document["verdict"] == "passed", summary(document)
    assert large["passed"] and large["cases"] == len(SMALL_SAMPLE_ROWS), large
    assert "isolated_child" in document["timings_s"], document["timings_s"]


def test_a_crash_in_the_isolated_check_keeps_every_earlier_verdict(small_large_offsets, tmp_path):
    path = tmp_path / "softmax_backward.py"
    path.write_text(CRASH_ON_LARGE.format(action="os.kill(os.getpid(), signal.SIGSEGV)", after=""))
    document = _grade(path)
    assert document["verdict"] == "failed" and document["error"] is None, summary(document)
    large = _check(document, "large_offsets")
    assert not large["passed"] and not large["skipped"], large
    assert "the process ended: crash" in large["message"] and "SIGSEGV" in large["message"], large["message"]
    assert "Hint: compute offsets in int64" in large["message"], large["message"]
    earlier = [c for c in document["checks"] if c["name"] != "large_offsets"]
    assert all(c["passed"] for c in earlier), summary(document)


def test_wrong_rows_past_the_boundary_are_named(small_large_offsets, tmp_path):
    path = tmp_path / "softmax_backward.py"
    path.write_text(CRASH_ON_LARGE.format(action="pass", after="dx[64:] = 0 if m == 70 else dx[64:]"))
    document = _grade(path)
    large = _check(document, "large_offsets")
    assert document["verdict"] == "failed" and not large["passed"], summary(document)
    assert "Rows [64, 65, 69] start past 2^31 elements and are wrong" in large["message"], large["message"]
    assert "int32 offset overflow" in large["message"], large["message"]


def test_wrong_rows_before_the_boundary_are_not_called_an_overflow(small_large_offsets, tmp_path):
    """A kernel wrong on rows that start before 2^31 elements (seen on the H200: a cheat zeroing
    odd rows of large calls) gets no int32 hint: the evidence says it is something else."""
    path = tmp_path / "softmax_backward.py"
    path.write_text(CRASH_ON_LARGE.format(action="pass", after="dx[1::2] = 0 if m == 70 else dx[1::2]"))
    document = _grade(path)
    large = _check(document, "large_offsets")
    assert document["verdict"] == "failed" and not large["passed"], summary(document)
    assert "Rows before 2^31 elements are wrong too ([1, 63])" in large["message"], large["message"]
    assert "not an int32 offset overflow" in large["message"], large["message"]
    assert "Hint" not in large["message"], large["message"]


def test_the_isolated_child_runs_beside_the_main_one_and_is_stopped_by_its_error(small_large_offsets, tmp_path):
    """The isolated child starts with the main child. A main child that ends with an error (here
    it exits during its first call) ends the grading at once: the isolated child, which would
    hang in its call for the whole time limit, is killed and its check listed as not run."""
    path = tmp_path / "softmax_backward.py"
    source = CRASH_ON_LARGE.format(action="import time; time.sleep(600)", after="")
    source = source.replace("    m, n = y.shape\n", "    m, n = y.shape\n    if m != 70:\n        os._exit(3)\n", 1)
    path.write_text(source)
    document = strict_json(grade_file(path, assignment="softmax_backward", device="cpu", seed=0,
                                      settings=settings(child_timeout_s=120)).to_json())
    assert document["verdict"] == "error" and document["error"]["kind"] == "exited", summary(document)
    large = _check(document, "large_offsets")
    assert large["skipped"] and large["message"].startswith("not run"), large
    # Not the 120 s the hanging isolated child would have taken: it was cancelled.
    assert document["duration_s"] < 90, document["timings_s"]
    assert "isolated_child" not in document["timings_s"], document["timings_s"]


def test_the_isolated_child_overlaps_the_main_one(small_large_offsets, tmp_path):
    """Both children sleep 4 s in a call (the main one on its first fp32 check call, the
    isolated one on its 70 x 64 call): the grading takes less than the two children's times
    added, so they ran at the same time."""
    path = tmp_path / "softmax_backward.py"
    source = CRASH_ON_LARGE.format(action="import time; time.sleep(4)", after="")
    source = source.replace("    m, n = y.shape\n",
                            "    m, n = y.shape\n    if (m, n) == (4, 300):\n        import time; time.sleep(4)\n", 1)
    path.write_text(source)
    document = _grade(path)
    assert document["verdict"] == "passed", summary(document)
    timings = document["timings_s"]
    assert timings["child"] > 4 and timings["isolated_child"] > 4, timings
    # The plan's inputs are built before either child starts (12 s on a loaded 2-core machine).
    assert document["duration_s"] - timings["inputs"] < timings["child"] + timings["isolated_child"], timings


@pytest.mark.parametrize("left", ["inputs", "nothing"])
def test_an_isolated_child_crowded_out_beside_the_main_one_runs_again_alone(small_large_offsets, tmp_path, left):
    """When the isolated child run beside the main one ended before the submission's import
    (it could not build its inputs on the device, or, leaving nothing, not even create its CUDA
    context: a submission could fill the memory to crowd the check out), the check is not
    skipped, nor the grading failed, on that evidence: the child runs again, alone, and that
    run decides."""
    from grader.assignments import get_assignment
    from grader.checks.plan import CheckEvidence
    from grader.children import check_children as children
    from grader.report.document import CapturedLog
    from grader.sandbox.run import ChildOutcome

    assignment = get_assignment("softmax_backward")
    plan = assignment.build_plan(seed=0, device="cpu")
    crowded = tmp_path / "crowded"
    crowded.mkdir()
    if left == "inputs":
        (crowded / "done.json").write_text('{"phase": "inputs", "exception": {"type": "OutOfMemoryError", '
                                           '"message": "CUDA out of memory"}}')

    class CrowdedOut:
        """The child beside the main one, as it ends when the memory was taken."""

        def result(self):
            return crowded, ChildOutcome(returncode=0, timed_out=False, memory_exceeded=False,
                                         output_exceeded=False, log=CapturedLog(), duration_s=1.5)

    (tmp_path / "cache").mkdir()
    evidence, finished, timings = CheckEvidence(calls={}, bank=plan.bank), set(), {}
    children.run_isolated(plan, assignment, REFERENCE.read_text(), evidence, finished, device="cpu",
                         settings=settings(), grading_dir=tmp_path, cache_dir=tmp_path / "cache",
                         timings=timings, started=CrowdedOut())
    assert timings["isolated_child_beside_main"] == 1.5 and "isolated_child" in timings, timings
    large = next(c for c in plan.checks if c.name == "large_offsets")
    assert large.skip_reason is None and "large_offsets" in finished
    outcome = large.evaluate(large, evidence)
    assert outcome.passed, outcome


def test_a_compile_only_pass_that_faulted_the_gpu_is_run_again_without_it(monkeypatch):
    """A main child that stops after its compile-only pass saying the pass left the CUDA context
    unusable (done.json phase ``precompile``, no check call made) is run again with
    ``precompile_threads=0``; only the second run is evidence, and a note says so."""
    import grader.runner as runner
    from grader.harness.protocol import DoneReport

    real_run_child = runner.run_child
    seen = []

    def run_child(plan, assignment, source, *, isolated, settings, **kwargs):
        seen.append((isolated, settings.precompile_threads))
        workdir, outcome = real_run_child(plan, assignment, source, isolated=isolated, settings=settings, **kwargs)
        if not isolated and len(seen) == 1:  # as a child whose pass faulted leaves it
            for leftover in workdir.glob("step_*"):
                leftover.unlink()
            (workdir / "done.json").write_text(DoneReport(phase="precompile").model_dump_json())
            outcome.progress.calls_started = 0
        return workdir, outcome

    monkeypatch.setattr(runner, "run_child", run_child)
    document = strict_json(grade_file(REFERENCE, assignment="softmax_backward", device="cpu", seed=0,
                                      settings=settings(precompile_threads=8)).to_json())
    assert seen == [(False, 8), (False, 0)], seen
    assert document["verdict"] == "passed", summary(document)
    assert any("ran twice" in note for note in document["notes"]), document["notes"]
    assert "child_with_faulted_precompile" in document["timings_s"]
