"""Faults of the grader or the machine are never charged to the student, and what the GPU run
taught us (docs/gpu-e2e.md, "What behaved differently on the GPU") stays fixed on CPU."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from grading_support import REFERENCE, requires_bwrap

from pydantic import ValidationError

from grader import evidence, runner, sandbox
from grader.harness.protocol import CallReport
from grader.sandbox import CapturedLog, ChildOutcome
from grader.settings import GraderSettings


class _Progress:
    def __init__(self, first: str | None, last: str | None, done: bool = False) -> None:
        self.first, self.last, self.done = first, last, done

    @property
    def started(self) -> bool:
        return self.first == "import"


def _outcome(**overrides) -> ChildOutcome:
    fields = dict(
        returncode=1,
        timed_out=False,
        memory_exceeded=False,
        output_exceeded=False,
        log=CapturedLog(text="bwrap: Can't bind mount /oldroot/usr/local/cuda-13.0", truncated=False, total_bytes=52),
        duration_s=0.1,
    )
    fields.update(overrides)
    return ChildOutcome(**fields)


def test_child_that_never_started_is_an_infrastructure_error(tmp_path):
    # The H200 run's first attempt: bubblewrap refused a bind, the harness never ran.
    with pytest.raises(runner.InfrastructureError, match="before importing the submission"):
        evidence.child_error(_outcome(progress=_Progress(None, None)), tmp_path, GraderSettings())


def test_child_that_started_then_exited_is_the_submissions_error(tmp_path):
    error = evidence.child_error(_outcome(returncode=0, progress=_Progress("import", "call autograd_fp32/0")), tmp_path,
                                 GraderSettings())
    assert error.kind == "exited"
    assert "autograd_fp32/0" in error.message


def test_signal_death_reported_as_crash(tmp_path):
    error = evidence.child_error(_outcome(returncode=139, signal=11, progress=_Progress("import", "call edge_shapes/2")),
                                 tmp_path, GraderSettings())
    assert error.kind == "crash" and "SIGSEGV" in error.message


def test_timeout_in_a_call_explains_compile_time_of_whole_row_blocks(tmp_path):
    # On the GPU a kernel with one 262144-element block per row compiled past the time limit.
    outcome = _outcome(returncode=-9, timed_out=True, progress=_Progress("import", "call edge_shapes/6"))
    error = evidence.child_error(outcome, tmp_path, GraderSettings(child_timeout_s=60))
    assert error.kind == "timeout"
    assert "edge_shapes/6" in error.message and "loop over long rows in chunks" in error.message


def test_driver_symlinks_are_recreated_not_bound(tmp_path, monkeypatch):
    # /usr/local/cuda is a symlink on the H200 host; binding over it made bubblewrap fail.
    target = tmp_path / "cuda-13.0"
    target.mkdir()
    link = tmp_path / "cuda"
    link.symlink_to(target)
    monkeypatch.setattr(sandbox, "_GPU_PATHS", (str(link),))
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: "/usr/bin/bwrap")
    monkeypatch.setattr(sandbox.os, "listdir", lambda path: [] if path == "/dev" else os.listdir(path))
    command = sandbox._bwrap_command(
        python="/usr/bin/python3", harness=tmp_path / "harness" / "check_child.py", workdir=tmp_path, device="cuda",
        settings=GraderSettings(), args=[], cache_dir=None,
    )
    index = command.index(str(link))
    assert command[index - 2] == "--symlink" and command[index - 1] == str(target)
    assert "/usr/local/cuda" not in command  # comes with the /usr bind


@requires_bwrap
def test_broken_harness_start_raises_infrastructure_error(monkeypatch, tmp_path):
    """A real sandboxed run whose harness dies before the import: exit 3, never a verdict."""
    broken = tmp_path / "broken-harness"
    broken.mkdir()
    (broken / "check_child.py").write_text("import sys\nsys.exit(1)\n")
    monkeypatch.setattr(sandbox, "HARNESS_SOURCE", broken)
    with pytest.raises(runner.InfrastructureError):
        runner.grade_file(REFERENCE, assignment="softmax_backward", device="cpu",
                          settings=GraderSettings(child_timeout_s=60))


@pytest.mark.parametrize("raw", [
    {"id": "autograd_fp32/0", "status": "passed!!"},
    {"id": "autograd_fp32/0", "status": "ok", "launches": "many"},
    {"id": "autograd_fp32/0", "status": "ok", "duration_s": -1.0},
    {"id": "autograd_fp32/0", "status": "raised", "exception": ["not", "a", "dict"]},
    {"id": "autograd_fp32/0", "status": "ok", "out": {"shape": ["x"]}},
    {"status": "ok"},
])
def test_malformed_child_reports_are_refused_not_trusted(raw):
    # A submission can rewrite its step reports; a report that does not validate counts as
    # missing (grader/evidence.py), so odd types neither crash the parent nor get stored.
    with pytest.raises(ValidationError):
        CallReport.model_validate(raw)


def test_long_strings_in_child_reports_are_cut():
    report = CallReport.model_validate({"id": "x" * 5000, "status": "raised",
                                        "exception": {"type": "E" * 500, "message": "m" * 10**6}})
    assert len(report.id) < 300 and len(report.exception.type) < 300 and len(report.exception.message) < 2100


def test_unexpected_grader_failure_exits_3_as_infrastructure(monkeypatch, capsys):
    from grader import cli

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(runner, "grade_file", broken)
    assert cli.main(["check", str(REFERENCE), "--device", "cpu", "--json", "-", "--quiet"]) == 3
    assert '"kind": "infrastructure"' in capsys.readouterr().out
