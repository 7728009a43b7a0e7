"""submissions/grading.py: the grader subprocess contract (exit codes, result document,
environment, caps), exercised with the fake grader in tests/service/fakes/."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest

from submissions.grading import (
    GradingCancelled,
    InfrastructureFailure,
    WarmGrader,
    build_grade_command,
    grader_environment,
    run_grader,
)
from submissions.models import SubmissionStatus
from submissions.storage import cap_bytes

from ..helpers import kernel_source, make_settings

SETTINGS = make_settings("sqlite:///unused.db", grader_timeout_s=20, stored_log_cap_bytes=1000)


def grade(directive: str, **overrides) -> object:
    settings = make_settings("sqlite:///unused.db", **{"grader_timeout_s": 20,
                                                       "stored_log_cap_bytes": 1000, **overrides})
    return run_grader(settings, assignment="softmax_backward", source_text=kernel_source(directive),
                      seed=1234, cancel=threading.Event())


def test_passed_with_checks_benchmark_and_versions() -> None:
    outcome = grade("speedup=1.93")
    assert outcome.status is SubmissionStatus.PASSED and outcome.exit_code == 0
    assert [c.name for c in outcome.checks] == ["autograd_fp32", "bf16_rows"]
    assert outcome.checks[0].numbers == {"max_abs_err": 1e-7, "tolerance": "1e-05 (fake)"}
    assert outcome.checks[1].skipped and not outcome.checks[1].passed
    assert outcome.headline_speedup == pytest.approx(1.93)
    assert outcome.result_document["seed"] == 1234
    assert outcome.versions["grader"] == "fake" and outcome.device == "cpu (fake)"


def test_failed_and_submission_error() -> None:
    failed = grade("verdict=failed")
    assert failed.status is SubmissionStatus.FAILED and failed.exit_code == 1
    assert failed.headline_speedup is None and "autograd_fp32" in failed.error_message
    error = grade("verdict=error error_kind=syntax")
    assert error.status is SubmissionStatus.ERROR and error.exit_code == 2
    assert error.error_kind == "syntax"


@pytest.mark.parametrize(
    ("directive", "reason"),
    [
        ("exit=3", "infrastructure error"),
        ("kill=1", "killed by SIGKILL"),
        ("garbage=1", "no valid JSON"),
        ("verdict=failed exit=0", "contradicts exit code"),
        ("verdict=passed exit=1", "contradicts exit code"),
        ("exit=7", "unexpected code 7"),
    ],
)
def test_infrastructure_failures_are_never_verdicts(directive: str, reason: str) -> None:
    with pytest.raises(InfrastructureFailure) as caught:
        grade(directive)
    assert reason in caught.value.reason


@pytest.mark.parametrize(
    ("directive", "reason"),
    [
        ("kill=1", "killed by SIGKILL"),
        ("garbage=1", "no valid JSON"),
        ("verdict=passed exit=1", "contradicts exit code"),
        ("exit=7", "unexpected code 7"),
    ],
)
def test_a_grader_that_breaks_after_the_submission_ran_is_the_submissions_charged_error(
        directive: str, reason: str) -> None:
    # Who pays (docs/security.md): once the submission's code ran (the grader reported the
    # checks stage), a grader that breaks broke on what that code produced: an error verdict,
    # counted against the student, never retried and never passed.
    outcome = grade(f"stages=checks:0 {directive}")
    assert outcome.status is SubmissionStatus.ERROR and outcome.error_kind == "unreadable_output"
    assert reason in outcome.error_message and "running the correctness checks" in outcome.error_message
    assert outcome.result_document["verdict"] == "error"
    assert outcome.result_document["assignment"] == "softmax_backward"


def test_the_graders_own_infrastructure_verdict_stays_infrastructure_after_the_checks_began() -> None:
    with pytest.raises(InfrastructureFailure, match="infrastructure error"):
        grade("stages=checks:0 exit=3")
    with pytest.raises(InfrastructureFailure, match="killed by SIGKILL"):
        grade("stages=preparing:0 kill=1")  # before the submission's code ran: ours


def test_outer_timeout_kills_the_grader_and_is_not_a_pass() -> None:
    with pytest.raises(InfrastructureFailure) as caught:
        grade("sleep=30", grader_timeout_s=0.5)
    assert "outer timeout" in caught.value.reason


def test_cancel_stops_the_grader() -> None:
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    with pytest.raises(GradingCancelled):
        run_grader(SETTINGS, assignment="softmax_backward",
                   source_text=kernel_source("sleep=30"), seed=1, cancel=cancel)


def test_command_environment_and_file_name(tmp_path, monkeypatch) -> None:
    record = tmp_path / "record.json"
    for name in ["GRADER_DATABASE_URL", "GRADER_INSTRUCTOR_TOKEN", "GRADER_DEPLOYMENT_SEED",
                 "PGPASSWORD", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN"]:
        monkeypatch.setenv(name, "secret-value")
    monkeypatch.setenv("GRADER_SANDBOX", "bwrap")  # a grader setting: passed through
    grade(f"record={record}", grader_device="cpu")
    seen = json.loads(record.read_text())
    assert seen["source_name"] == "softmax_backward.py"
    assert seen["argv"][2:] == ["--json", "-", "--seed", "1234", "--device", "cpu",
                                "--benchmark", "auto", "--assignment", "softmax_backward"]
    for name in ["GRADER_DATABASE_URL", "GRADER_INSTRUCTOR_TOKEN", "GRADER_DEPLOYMENT_SEED",
                 "PGPASSWORD", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN"]:
        assert name not in seen["env"]
    assert "GRADER_SANDBOX" in seen["env"]
    assert seen["stdin_is_devnull"]
    assert seen["work_root"] == str(Path(seen["cwd"]) / "work")
    assert not Path(seen["cwd"]).exists(), "the grading's private folder must be removed after it"


def test_a_killed_graders_folders_are_removed_by_the_worker(tmp_path) -> None:
    """SIGKILL leaves the grader no chance to clean up: the worker removes its private folder,
    grading folders (GRADER_WORK_ROOT) included."""
    record = tmp_path / "record.json"
    with pytest.raises(InfrastructureFailure, match="killed by SIGKILL"):
        grade(f"record={record} kill=1", grader_device="cpu")
    seen = json.loads(record.read_text())
    assert seen["work_root"] == str(Path(seen["cwd"]) / "work")
    assert not Path(seen["cwd"]).exists()


def test_a_grader_started_ahead_gets_its_job_on_stdin(tmp_path, monkeypatch) -> None:
    """The worker starts the next grader before its job (WarmGrader): the job reaches that very
    process as one line on stdin, which is then closed; the environment is scrubbed alike."""
    record = tmp_path / "record.json"
    monkeypatch.setenv("GRADER_INSTRUCTOR_TOKEN", "secret-value")
    settings = make_settings("sqlite:///unused.db", grader_timeout_s=20, grader_device="cpu")
    warm = WarmGrader(settings)
    try:
        outcome = run_grader(settings, assignment="softmax_backward", source_text=kernel_source(f"record={record}"),
                             seed=99, cancel=threading.Event(), warm=warm)
    finally:
        warm.close()
    assert outcome.status is SubmissionStatus.PASSED
    seen = json.loads(record.read_text())
    assert seen["pid"] == warm.process.pid and seen["source_name"] == "softmax_backward.py"
    assert seen["argv"][1:] == ["--job-on-stdin", "--json", "-", "--device", "cpu", "--benchmark", "auto"]
    assert "GRADER_INSTRUCTOR_TOKEN" not in seen["env"] and seen["stdin_is_devnull"]
    # Its grading folders (the mount point of its tmpfs) in its private folder, removed with it.
    assert seen["work_root"] == str(warm.root / "work") and seen["cwd"] == str(warm.root)
    assert not warm.root.exists()


def test_a_grader_started_ahead_and_never_given_a_job_exits_on_its_own() -> None:
    """Closing it ends its stdin: it exits by itself (the real grader then ends the check child
    it started ahead and removes that child's folder: tests/grader/test_runner_infrastructure.py),
    rather than being killed with its cleanup undone."""
    warm = WarmGrader(make_settings("sqlite:///unused.db", grader_timeout_s=20, grader_device="cpu"))
    warm.close()
    assert warm.process.returncode == 0 and not warm.root.exists()


def test_a_grader_started_ahead_that_died_is_replaced_for_the_job(tmp_path) -> None:
    record = tmp_path / "record.json"
    settings = make_settings("sqlite:///unused.db", grader_timeout_s=20)
    warm = WarmGrader(settings)
    warm.process.kill()
    warm.process.wait()
    try:
        outcome = run_grader(settings, assignment="softmax_backward", source_text=kernel_source(f"record={record}"),
                             seed=5, cancel=threading.Event(), warm=warm)
    finally:
        warm.close()
    assert outcome.status is SubmissionStatus.PASSED
    seen = json.loads(record.read_text())
    assert seen["pid"] != warm.process.pid and "--job-on-stdin" not in seen["argv"]
    assert seen["argv"][2:4] == ["--json", "-"]


def test_default_command_is_python_m_grader_check() -> None:
    from submissions.settings import Settings

    real = Settings(_env_file=None)
    command = build_grade_command(real, source_path="/tmp/x/softmax_backward.py", seed=7,
                                  assignment="softmax_backward")
    assert command[1:] == ["-m", "grader", "check", "/tmp/x/softmax_backward.py", "--json", "-",
                           "--seed", "7", "--device", "auto", "--benchmark", "auto",
                           "--assignment", "softmax_backward"]


def test_logs_keep_head_and_tail_within_the_cap() -> None:
    outcome = grade("log_bytes=50000 stderr_bytes=70000")
    assert outcome.log_truncated and len(outcome.log_text) < 1200
    assert "bytes omitted" in outcome.log_text and "truncated" in outcome.log_text
    assert outcome.result_document["log"]["truncated"] is True
    assert "bytes omitted" in outcome.grader_stderr and len(outcome.grader_stderr) < 1200

    capped = cap_bytes(b"a" * 10 + b"b" * 100 + b"c" * 10, limit=20)
    assert capped.truncated and capped.total_bytes == 120
    assert capped.text.startswith("a" * 10) and capped.text.endswith("c" * 10)
    assert "100 bytes omitted" in capped.text and capped.omitted_bytes == 100
    # A log the grader had already cut: the marker and the count give the total missing.
    again = cap_bytes(b"a" * 10 + b"b" * 100 + b"c" * 10, limit=20, omitted_before=5000)
    assert "5100 bytes omitted" in again.text and again.omitted_bytes == 100


def test_stored_log_counts_what_the_grader_and_the_service_cut() -> None:
    """The grader cut 7000 bytes of the child's log already; the service cuts more to store it.
    The stored count and the marker in the text both give the total missing."""
    outcome = grade("log_bytes=50000 log_omitted=7000")
    log = outcome.result_document["log"]
    marker = re.findall(r"\[\.\.\. (\d+) bytes omitted", log["text"])
    assert log["truncated"] and len(marker) == 1, log["text"][:300]
    kept = log["text"].count("L")
    assert log["omitted_bytes"] == 7000 + (50000 - kept), log["omitted_bytes"]
    assert int(marker[0]) == log["omitted_bytes"]


def test_environment_filter_keeps_ordinary_variables() -> None:
    env = grader_environment({"PATH": "/bin", "HOME": "/h", "GRADER_LEASE_S": "5",
                              "MY_API_KEY": "k", "CUDA_VISIBLE_DEVICES": "0"})
    assert env["PATH"] == "/bin" and env["CUDA_VISIBLE_DEVICES"] == "0"
    assert "GRADER_LEASE_S" not in env and "MY_API_KEY" not in env


def test_a_worker_that_runs_the_real_grader_knows_at_once_when_no_bwrap_works(tmp_path, monkeypatch) -> None:
    """grading_sandbox_problem: the worker's start-up check (no torch), for the default
    `grader check` only; another grade command is its own judge."""
    from grader.sandbox import bwrap
    from submissions.grading import grading_sandbox_problem
    from submissions.settings import default_grade_command

    broken = tmp_path / "bwrap"
    broken.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    broken.chmod(0o755)
    real = make_settings(f"sqlite:///{tmp_path}/g.db", grade_command=default_grade_command())
    bwrap._resolve.cache_clear()
    assert grading_sandbox_problem(real) is None  # this machine's bwrap (or the wheel's) works
    monkeypatch.setenv("GRADER_BWRAP", str(broken))
    problem = grading_sandbox_problem(real)
    assert problem is not None and "setting up uid map: Permission denied" in problem and "Fix:" in problem
    assert grading_sandbox_problem(make_settings(f"sqlite:///{tmp_path}/g.db")) is None  # the fake grader
    monkeypatch.setenv("GRADER_SANDBOX", "unsafe-none")
    assert grading_sandbox_problem(real) is None
