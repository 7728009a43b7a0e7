"""The stages of a grading (grader/stages.py) as a real grading reports them: forward only,
each once, and written to the stage file ``grader check`` is given."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from grading_support import REFERENCE, requires_bwrap, settings

from grader.runner import grade_file
from grader.stages import GradingStage, read_stage_file, report_stage, stage_listener

ROOT = Path(__file__).resolve().parents[2]


def test_stages_move_forward_only_and_each_is_reported_once() -> None:
    seen: list[GradingStage] = []
    with stage_listener(seen.append):
        for stage in ("preparing", "checks", "compiling", "checks", "benchmark", "preparing"):
            report_stage(GradingStage(stage))
    report_stage(GradingStage.BENCHMARK)  # no listener: ignored
    assert seen == [GradingStage.PREPARING, GradingStage.CHECKS, GradingStage.BENCHMARK]


@requires_bwrap
def test_a_cpu_grading_of_the_reference_reports_preparing_then_checks() -> None:
    """On the CPU there is no compile-only pass and no timing: preparing, then the checks (from
    the main check child's first call line, not the isolated child's)."""
    seen: list[GradingStage] = []
    document = grade_file(REFERENCE, assignment="softmax_backward", device="cpu", seed=3,
                          settings=settings(), on_stage=seen.append)
    assert document.verdict.value == "passed"
    assert seen == [GradingStage.PREPARING, GradingStage.CHECKS]


@requires_bwrap
def test_grader_check_writes_the_stage_file_it_is_given(tmp_path: Path) -> None:
    stage_file = tmp_path / "stage.json"
    env = {**os.environ, "GRADER_STAGE_FILE": str(stage_file)}
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run([sys.executable, "-m", "grader", "check", str(REFERENCE), "--device", "cpu", "--quiet"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = read_stage_file(stage_file)
    assert report is not None and report.stage is GradingStage.CHECKS and report.at.tzinfo is not None
