"""Faults of the grader or the machine are never charged to the student, and what the GPU run
taught us (docs/gpu-e2e.md, "What behaved differently on the GPU") stays fixed on CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from grading_support import REFERENCE, requires_bwrap
from pydantic import ValidationError

from grader import runner
from grader.children import check_children as children
from grader.evidence import reader as evidence
from grader.harness.protocol import CallReport
from grader.report.document import ErrorKind, ExitCode, GradeJob, ResultDocument
from grader.sandbox import child_limits, progress
from grader.sandbox import run as sandbox
from grader.sandbox.bwrap import Bubblewrap
from grader.sandbox.run import CapturedLog, ChildOutcome
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


def test_a_child_at_its_memory_limit_is_a_resource_limit_even_when_a_time_limit_ended_it(tmp_path):
    # Under load a 16 GiB allocation in a 2 GiB cgroup met the first call's CPU limit while the
    # kernel reclaimed: the memory limit is what it ran into.
    outcome = _outcome(returncode=-9, signal=9, timed_out=True, first_call_timed_out=True, memory_exceeded=True,
                       progress=_Progress("import", "call example_two_element/0"))
    error = evidence.child_error(outcome, tmp_path, GraderSettings(memory_limit_bytes=2 << 30))
    assert error.kind == "resource_limit" and "2 GiB of host memory" in error.message, error
    alone = evidence.child_error(_outcome(returncode=-9, signal=9, timed_out=True, first_call_timed_out=True,
                                          progress=_Progress("import", "call example_two_element/0")),
                                 tmp_path, GraderSettings())
    assert alone.kind == "timeout", alone


def test_child_that_started_then_exited_is_the_submissions_error(tmp_path):
    error = evidence.child_error(_outcome(returncode=0, progress=_Progress("import", "call autograd_fp32/0")), tmp_path,
                                 GraderSettings())
    assert error.kind == "exited"
    assert "autograd_fp32/0" in error.message


def test_signal_death_reported_as_crash(tmp_path):
    error = evidence.child_error(_outcome(returncode=139, signal=11, progress=_Progress("import", "call edge_shapes/2")),
                                 tmp_path, GraderSettings())
    assert error.kind == "crash" and "SIGSEGV" in error.message


def test_cpu_timeout_text_speaks_of_the_interpreter_not_of_gpu_compilation(tmp_path):
    outcome = _outcome(returncode=-9, timed_out=True, progress=_Progress("import", "call edge_shapes/5"))
    error = evidence.child_error(outcome, tmp_path, GraderSettings(child_timeout_s=60), device="cpu")
    assert error.kind == "timeout"
    assert "edge_shapes/5" in error.message and "CPU interpreter" in error.message, error.message
    assert "compil" not in error.message and "GPU" not in error.message, error.message


def test_gpu_timeout_text_reports_the_compile_time_that_was_not_counted(tmp_path):
    outcome = _outcome(returncode=-9, timed_out=True, progress=_Progress("import", "call half_precision/3"),
                       compile_s=42.0, compile_excluded_s=42.0)
    error = evidence.child_error(outcome, tmp_path, GraderSettings(child_timeout_s=60, compile_budget_s=300),
                                 device="cuda")
    assert "42 s of Triton compilation were not counted (compile budget 300 s)" in error.message, error.message
    assert "CPU interpreter" not in error.message
    assert error.details == {"compile_s": 42.0}


def test_gpu_timeout_past_the_compile_budget_says_why(tmp_path):
    # On the GPU a kernel with one 262144-element block per row compiled for 125 s.
    outcome = _outcome(returncode=-9, timed_out=True, progress=_Progress("import", "call edge_shapes/5"),
                       compile_s=310.0, compile_excluded_s=300.0, compile_budget_exhausted=True)
    error = evidence.child_error(outcome, tmp_path, GraderSettings(child_timeout_s=60, compile_budget_s=300),
                                 device="cuda")
    assert "past the compile budget of 300 s" in error.message and "loop over long rows in chunks" in error.message


# ---- the compile budget: the parent's clock, the child's progress lines ------------------------
class _FakeProgress:
    def __init__(self, compiled: float) -> None:
        self.compiled = compiled

    def compile_seconds(self, now=None) -> float:
        return self.compiled


def test_wall_clock_leaves_out_compile_time_up_to_the_budget():
    clock = child_limits.WallClock(limit_s=10.0, compile_budget_s=30.0, progress=_FakeProgress(12.0))
    now = clock.started + 15.0
    assert clock.remaining_s(now) == pytest.approx(10.0 + 12.0 - 15.0)
    assert not clock.budget_exhausted(now)
    greedy = child_limits.WallClock(limit_s=10.0, compile_budget_s=30.0, progress=_FakeProgress(1e9))
    assert greedy.remaining_s(greedy.started + 40.0) == pytest.approx(0.0)  # hard cap: limit + budget
    assert greedy.budget_exhausted(greedy.started + 40.0)
    plain = child_limits.WallClock(limit_s=10.0, compile_budget_s=30.0, progress=None)
    assert plain.remaining_s(plain.started + 11.0) == pytest.approx(-1.0)  # no pipe: compile time counts


def test_wall_clock_leaves_out_the_parents_idle_time():
    clock = child_limits.WallClock(limit_s=10.0, compile_budget_s=0.0, progress=None, idle_s=lambda now: 25.0)
    assert clock.remaining_s(clock.started + 30.0) == pytest.approx(10.0 + 25.0 - 30.0)


def test_replay_process_idle_time_is_its_waits_for_plans_capped(tmp_path):
    """The replay process's clock leaves out its wait for phase 1 and, once phase 1 is done,
    its wait for phase 2; never its own work, and never more than max_idle_s."""
    from grader.assignments import get_assignment
    from grader.children.replay_process import ReplayProcess
    from grader.harness.protocol import BenchmarkPlan, ReplayResult, TimingOptions
    from grader.manifest import DEFAULT_ASSIGNMENT

    process = ReplayProcess(get_assignment(DEFAULT_ASSIGNMENT), GraderSettings(work_root=str(tmp_path)),
                            timeout_s=100.0, max_idle_s=50.0)
    try:
        start = process._started
        assert process.idle_s(start + 7.0) == pytest.approx(7.0)  # waiting for phase 1
        assert process.idle_s(start + 500.0) == pytest.approx(50.0)  # capped
        process._checks_sent = start + 7.0
        assert process.idle_s(start + 20.0) == pytest.approx(7.0)  # phase 1 running: its own work
        result = process.workdir / "replay_result.json"
        result.write_text(ReplayResult(phase="checks").model_dump_json())
        os.utime(result, (time.time() - 4.0, time.time() - 4.0))  # phase 1 ended 4 s ago
        assert process.idle_s(start + 20.0) == pytest.approx(11.0, abs=0.5)
        process.send_benchmark(BenchmarkPlan(rows=[], options=TimingOptions()))
        idle = process.idle_s(start + 90.0)
        assert idle == pytest.approx(11.0, abs=0.5), "phase 2 is the process's own work"
    finally:
        process.close()


def test_progress_lines_time_compilation_by_the_parents_clock(tmp_path):
    read, write = os.pipe()
    lines = progress.ProgressLines(read)
    lines.start()
    os.write(write, b"import\ncall a/0\ncompile begin\n")
    time.sleep(0.5)
    assert lines.compiling and lines.compile_seconds() >= 0.4
    os.write(write, b"compile begin\ncompile end\n")  # nested: still compiling
    time.sleep(0.05)
    assert lines.compiling
    os.write(write, b"compile end\ncall a/1\n")
    os.close(write)
    lines.join(timeout=5)
    assert not lines.compiling and 0.4 <= lines.compile_seconds() < 5
    assert lines.first == "import" and lines.last == "call a/1"  # compile lines never become "last"


_FAKE_HARNESS = """
import os, sys, time
fd = int(sys.argv[-1])
os.write(fd, b"import\\n")
mode = sys.argv[1]
if mode == "compile_then_work":
    os.write(fd, b"compile begin\\n"); time.sleep(4); os.write(fd, b"compile end\\n"); time.sleep(0.5)
elif mode == "compile_forever":
    os.write(fd, b"compile begin\\n"); time.sleep(60)
else:
    time.sleep(60)
os.write(fd, b"done\\n")
"""


@requires_bwrap
@pytest.mark.parametrize("mode, timed_out, low, high", [
    ("compile_then_work", False, 4.0, 8.0),  # 4 s of "compiling" under a 3 s limit: finishes
    ("compile_forever", True, 3.0 + 4.0, 3.0 + 4.0 + 4.0),  # stopped at limit + budget
    ("work_forever", True, 3.0, 3.0 + 4.0),  # no compile claimed: stopped at the limit
])
def test_compile_budget_in_a_real_sandboxed_child(mode, timed_out, low, high, tmp_path):
    harness_dir = tmp_path / "harness"
    harness_dir.mkdir()
    (harness_dir / "fake_child.py").write_text(_FAKE_HARNESS)
    workdir = tmp_path / "work"
    workdir.mkdir()
    outcome = sandbox.run_sandboxed(harness=harness_dir / "fake_child.py", workdir=workdir, device="cpu",
                                    # A wall-clock limit (the ceiling at 1x): these children sleep.
                                    settings=GraderSettings(sandbox="bwrap", child_timeout_s=3.0,
                                                            cpu_wall_ceiling_factor=1.0), args=[mode],
                                    progress=True, compile_budget_s=4.0)
    assert outcome.timed_out is timed_out, outcome
    assert low <= outcome.duration_s <= high, outcome.duration_s
    if mode == "compile_then_work":
        assert outcome.progress.done and 3.5 <= outcome.compile_s <= 6 and outcome.compile_excluded_s <= 4.0
    if mode == "compile_forever":
        assert outcome.compile_budget_exhausted and outcome.compile_excluded_s == pytest.approx(4.0)
    assert outcome.limits["compile_budget_s"] == 4.0


def test_driver_symlinks_are_recreated_not_bound(tmp_path, monkeypatch):
    # /usr/local/cuda is a symlink on the H200 host; binding over it made bubblewrap fail.
    target = tmp_path / "cuda-13.0"
    target.mkdir()
    link = tmp_path / "cuda"
    link.symlink_to(target)
    monkeypatch.setattr(sandbox, "_GPU_PATHS", (str(link),))
    monkeypatch.setattr(sandbox, "resolve_bwrap", lambda settings: Bubblewrap("/usr/bin/bwrap", "bubblewrap 0.8.0", "system"))
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
    # missing (grader/evidence/reader.py), so odd types neither crash the parent nor get stored.
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


def test_progress_marks_give_the_childs_phases_by_the_parents_clock():
    """The first line of each phase is time-stamped as it arrives (ProgressLines.marks), and the
    runner turns the marks into the main child's phases (timings_s: child_startup, ...)."""
    read, write = os.pipe()
    lines = progress.ProgressLines(read)
    started = time.monotonic()
    lines.start()
    for chunk in (b"import\n", b"precompile\ncompile begin\n", b"compile end\ncall a/0\n", b"call a/1\n",
                  b"call benchmark 4x4/float32#warmup\n", b"done\n"):
        time.sleep(0.2)
        os.write(write, chunk)
    os.close(write)
    lines.join(timeout=5)
    assert list(lines.marks) == ["import", "precompile", "call", "benchmark", "done"]
    phases = children.child_phases(_outcome(progress=lines, started=started))
    assert list(phases) == ["child_startup", "child_import", "child_precompile", "child_checks", "child_rows"]
    assert all(0.1 < seconds < 2.0 for seconds in phases.values()), phases
    assert children.child_phases(_outcome()) == {}


def _check_with_job_on_stdin(job: str, work_root: Path | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, **({"GRADER_WORK_ROOT": str(work_root)} if work_root else {})}
    return subprocess.run([sys.executable, "-m", "grader", "check", "--job-on-stdin", "--device", "cpu", "--json", "-"],
                          input=job, capture_output=True, text=True, timeout=120, env=environment)


def test_a_grader_started_ahead_grades_the_job_it_reads_on_stdin(tmp_path):
    """`grader check --job-on-stdin` (the worker's warm grader) loads, then grades the file, seed
    and assignment of one GradeJob line; a file the validator refuses is the submission's error."""
    source = tmp_path / "softmax_backward.py"
    source.write_text("def softmax_backward(y, g)\n    return y\n")
    job = GradeJob(source=str(source), seed=4242, assignment="softmax_backward").model_dump_json()
    finished = _check_with_job_on_stdin(job + "\n")
    assert finished.returncode == ExitCode.SUBMISSION_ERROR, finished.stderr
    document = ResultDocument.model_validate_json(finished.stdout)
    assert document.seed == 4242 and document.error.kind == ErrorKind.SYNTAX


def test_a_grader_started_ahead_without_a_job_ends_quietly_and_a_bad_job_is_ours(tmp_path):
    closed = _check_with_job_on_stdin("", work_root=tmp_path)
    assert closed.returncode == 0 and closed.stdout == "", closed.stderr
    assert list(tmp_path.iterdir()) == [], "the check child it started ahead is ended and its folder removed"
    malformed = _check_with_job_on_stdin('{"source": "x.py"}\n')
    assert malformed.returncode == ExitCode.INFRASTRUCTURE and "no job read from stdin" in malformed.stderr


_CPU_HARNESS = """
import os, sys, time
fd = int(sys.argv[-1])
os.write(fd, b"import\\n")
mode, seconds = sys.argv[1], float(sys.argv[2])
os.write(fd, b"call work/0\\n")
if mode == "sleep":
    time.sleep(seconds)
else:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
os.write(fd, b"done\\n")
"""


def _cpu_child(tmp_path, mode: str, seconds: float, *, limit_s: float, factor: float = 2.0, cores=None):
    """Run the CPU harness in the sandbox on device cpu (CPU-time limit), optionally pinned to
    ``cores`` (the child inherits the affinity of the thread that starts it)."""
    harness_dir = tmp_path / "harness"
    harness_dir.mkdir(exist_ok=True)
    (harness_dir / "cpu_child.py").write_text(_CPU_HARNESS)
    workdir = tmp_path / f"work-{len(list(tmp_path.glob('work-*')))}"
    workdir.mkdir()
    before = os.sched_getaffinity(0)
    if cores is not None:
        os.sched_setaffinity(0, cores)
    try:
        return sandbox.run_sandboxed(
            harness=harness_dir / "cpu_child.py", workdir=workdir, device="cpu", args=[mode, str(seconds)],
            settings=GraderSettings(sandbox="bwrap", child_timeout_s=limit_s, cpu_wall_ceiling_factor=factor),
            progress=True)
    finally:
        os.sched_setaffinity(0, before)


@requires_bwrap
def test_a_cpu_run_is_stopped_at_its_cpu_limit_naming_the_call(tmp_path):
    outcome = _cpu_child(tmp_path, "spin", 60, limit_s=2.0)
    assert outcome.timed_out and outcome.timeout_clock == "cpu", outcome
    assert 2.0 <= outcome.cpu_s <= 3.5, outcome.cpu_s  # sampled once a second
    assert outcome.limits["clock"] == "cpu" and outcome.limits["cpu_s"] == 2.0 and outcome.limits["wall_s"] == 4.0
    assert outcome.running["line"] == "call work/0" and 0 < outcome.running["cpu_s"] <= outcome.cpu_s
    assert outcome.running["wall_s"] >= outcome.running["cpu_s"] * 0.9
    assert set(outcome.load) == {"load_1min", "cores", "child_cpu_share", "loaded"}


@requires_bwrap
def test_a_cpu_run_that_sleeps_ends_at_the_wall_clock_ceiling(tmp_path):
    outcome = _cpu_child(tmp_path, "sleep", 60, limit_s=1.5)
    assert outcome.timed_out and outcome.timeout_clock == "wall", outcome
    assert 3.0 <= outcome.duration_s <= 6.0, outcome.duration_s  # 2 x 1.5 s; a sleeper does not wait for a CPU
    assert outcome.cpu_s < 1.0, outcome.cpu_s


@requires_bwrap
def test_a_cpu_run_gets_the_same_verdict_on_a_loaded_core(tmp_path):
    """1.5 s of CPU work under a 2.5 s CPU limit finishes, alone or sharing one core with two
    busy processes (a third of the core: over 4 s of wall time, past the limit and past the
    ceiling's 5 s had the ceiling counted run-queue time); 4 s of work is stopped either way."""
    spin = "import time\nend = time.monotonic() + 40\nwhile time.monotonic() < end: pass\n"
    core = {sorted(os.sched_getaffinity(0))[0]}
    alone = _cpu_child(tmp_path, "spin", 1.5, limit_s=2.5, cores=core)
    hogs = [subprocess.Popen([sys.executable, "-c", spin], preexec_fn=lambda: os.sched_setaffinity(0, core))  # noqa: PLW1509
            for _ in range(2)]
    try:
        time.sleep(0.5)
        loaded = _cpu_child(tmp_path, "spin", 1.5, limit_s=2.5, cores=core)
        over = _cpu_child(tmp_path, "spin", 4.0, limit_s=2.5, cores=core)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert not alone.timed_out and alone.progress.done, alone
    assert not loaded.timed_out and loaded.progress.done, loaded
    assert loaded.duration_s > 2.5, "the core was not shared: the test shows nothing"
    assert loaded.load["child_cpu_share"] < 0.6, loaded.load
    assert over.timed_out and over.timeout_clock == "cpu", over


def test_compile_threads_scale_with_the_cores_and_the_memory_limit(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    threads = children.precompile_threads
    assert threads(GraderSettings(precompile_threads=8, memory_limit_bytes=8 << 30)) == 8  # 1 GiB each
    assert threads(GraderSettings(precompile_threads=8, memory_limit_bytes=3 << 30)) == 3
    assert threads(GraderSettings(precompile_threads=8, memory_limit_bytes=512 << 20)) == 1  # never 0 by memory
    assert threads(GraderSettings(precompile_threads=8, memory_limit_bytes=64 << 30)) == 8
    assert threads(GraderSettings(precompile_threads=0)) == 0  # the pass is off
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    assert threads(GraderSettings(precompile_threads=8, memory_limit_bytes=64 << 30)) == 2


_COMPILE_BOMB = """
import os, sys, time
fd = int(sys.argv[-1])
mark = '{"kernel": "_row_kernel", "constants": {"BLOCK_SIZE": 262144}, "num_warps": 16}'
os.write(fd, ("import\\nprecompile\\ncompile begin\\ncompiling 1 " + mark + "\\n").encode())
time.sleep(1.0)
held = [bytearray(64 << 20) for _ in range(64)]  # 4 GiB, as LLVM on a huge block might
time.sleep(60)
"""


@requires_bwrap
def test_a_memory_limit_hit_while_compiling_names_the_kernel_its_block_and_the_cost(tmp_path):
    harness_dir = tmp_path / "harness"
    harness_dir.mkdir()
    (harness_dir / "bomb.py").write_text(_COMPILE_BOMB)
    workdir = tmp_path / "work"
    workdir.mkdir()
    settings = GraderSettings(sandbox="bwrap", child_timeout_s=60.0, memory_limit_bytes=512 << 20)
    outcome = sandbox.run_sandboxed(harness=harness_dir / "bomb.py", workdir=workdir, device="cpu", args=[],
                                    settings=settings, progress=True, compile_budget_s=30.0)
    assert outcome.memory_exceeded, outcome
    error = evidence.child_error(outcome, workdir, settings, device="cuda")
    assert error.kind is ErrorKind.RESOURCE_LIMIT  # the submission's error, not a crash
    assert "during the compile-only pass" in error.message, error.message
    assert "compiling then: _row_kernel (BLOCK_SIZE=262144, num_warps=16) for " in error.message, error.message
    (entry,) = error.details["compilations"]
    assert entry["open"] and entry["seconds"] >= 0.9, entry
