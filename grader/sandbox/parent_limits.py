"""Limits of the grader's own process (the trusted parent), beside the sandboxed children's.

The parent reads back only capped files (grader/evidence/child_files.py) and never waits on one, so a
hostile file cannot hold it; these limits bound what is left, a bug of the grader's own:

- memory: RLIMIT_DATA (``parent_memory_bytes``) on CPU gradings;
- open files: RLIMIT_NOFILE (``parent_max_open_files``);
- wall clock: ``parent_timeout_s`` from the job's start, by ``alarm(2)``: SIGALRM's default
  action ends the process, its sandboxed children die with it (bubblewrap's
  ``--die-with-parent``), and the worker sees an infrastructure failure and retries.

Privilege: started as root, the parent stays root, because a per-child cgroup (exact memory
and process limits, OOM and refused-fork accounting; grader/sandbox/child_limits.py ``Cgroup``) needs
it, and RLIMIT_NPROC, the alternative, counts every task of the uid. What root could do with
a child's file is closed by the reader's checks instead; the children themselves run as uid
65534 in user namespaces of their own with every capability dropped.
"""

from __future__ import annotations

import contextlib
import resource
import signal
import threading
from collections.abc import Iterator

from grader.report.document import ErrorKind, GradingError
from grader.sandbox.child_limits import REPLAY_STARTUP_S
from grader.settings import GraderSettings


def apply_parent_limits(settings: GraderSettings, *, device: str) -> dict[str, int | float]:
    """Set this process's limits (see the module docstring); ``device``: the grading's device,
    ``cpu`` or ``cuda`` (RLIMIT_DATA only on ``cpu``). Returns what was set, for logs.

    Never raises a hard limit."""
    applied: dict[str, int | float] = {}
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    files = settings.parent_max_open_files if hard == resource.RLIM_INFINITY else min(hard, settings.parent_max_open_files)
    resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))
    applied["open_files"] = files
    if device == "cpu":
        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        cap = settings.parent_memory_bytes
        if hard != resource.RLIM_INFINITY:
            cap = min(cap, hard)
        if soft == resource.RLIM_INFINITY or soft > cap:
            resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
            applied["data_bytes"] = cap
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(max(1, int(settings.parent_timeout_s)))
    applied["wall_s"] = settings.parent_timeout_s
    return applied


def hostile_hold_bound_s(settings: GraderSettings, *, device: str, benchmark_timeout_s: float = 0.0) -> float:
    """The longest one grading can hold its worker, by the limits of the processes it runs
    (seconds); docs/security.md states it, tests/grader/test_parent_limits.py holds it to that.

    A submission's own child may live ``child_timeout_s + compile_budget_s`` (it can claim to
    compile on its progress pipe; WallClock). On the CPU interpreter that child is all there
    is. On a GPU, up to three such children run one after another (the main child; its rerun
    when it says its compile-only pass faulted the GPU; the isolated child's rerun alone when
    it ended before the import), then the replay process's own work: its start-up, phase 1
    (``child_timeout_s``) and the timed rows (``benchmark_timeout_s``,
    BenchmarkOptions.student_timeout_s; 0 without a benchmark). The parent then reads and
    judges what they left within ``parent_evidence_cpu_s`` of its own CPU time (read as
    seconds here: its readers are linear and never wait on a file). The grader's own wall
    clock (``parent_timeout_s``) caps the sum; a grader it ends after the submission's code ran
    is the submission's charged error (submissions/grading.py), so the hold is not repeated.
    """
    child = settings.child_timeout_s + settings.compile_budget_s
    if device == "cpu":
        children = child
    else:
        children = 3 * child + REPLAY_STARTUP_S + settings.child_timeout_s + benchmark_timeout_s
    return min(settings.parent_timeout_s, children + settings.parent_evidence_cpu_s)

class ParentBudgetSpent(Exception):
    """The grader spent its CPU budget reading and judging what a submission's children
    produced (``charged_cpu_budget``): the submission's ``resource_limit`` error.

    Attributes:
        seconds: the budget, CPU seconds of this process (all its threads).
    """

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the grader spent more than {seconds:g} s of CPU time reading and checking what the run "
                         "produced")
        self.seconds = seconds

    def grading_error(self) -> GradingError:
        """The submission's charged error (never an infrastructure error)."""
        return GradingError(
            kind=ErrorKind.RESOURCE_LIMIT,
            message=(f"{self}: the files and reports the submission's process left were too many or too large to "
                     "read in that time (an honest run's take well under a second)"),
            details={"parent_cpu_budget_s": self.seconds})


@contextlib.contextmanager
def charged_cpu_budget(seconds: float) -> Iterator[None]:
    """Raise ``ParentBudgetSpent`` in this (the main) thread once the process has used
    `seconds` of CPU time inside the block (``ITIMER_PROF``: user and system time of every
    thread), so that no reader of a child's bytes can hold the worker longer, whatever it
    meets. A no-op outside the main thread (signals are delivered there only) and for
    ``seconds <= 0``; the previous SIGPROF handler and timer are restored on exit.

    Raises:
        ParentBudgetSpent: the budget ran out inside the block.
    """
    if seconds <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def spent(_signum: int, _frame: object) -> None:
        signal.setitimer(signal.ITIMER_PROF, 0)
        raise ParentBudgetSpent(seconds)

    previous = signal.signal(signal.SIGPROF, spent)
    outer = signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, previous)
        if outer[0] > 0:
            signal.setitimer(signal.ITIMER_PROF, *outer)


def unreadable_output_error(exc: BaseException) -> GradingError:
    """The submission's charged error for a failure the trusted side met on what the run
    produced (docs/security.md, "Who pays"): ``resource_limit`` for memory, else
    ``unreadable_output``, naming the exception's type (its text may be the submission's, so
    it is kept as data in ``details``, cut to 500 characters)."""
    if isinstance(exc, MemoryError):
        return GradingError(kind=ErrorKind.RESOURCE_LIMIT,
                            message="the grader ran out of memory reading what the run produced (too many or too large "
                                    "outputs, reports or files)")
    return GradingError(
        kind=ErrorKind.UNREADABLE_OUTPUT,
        message=(f"the grader could not read or check what the run produced ({type(exc).__name__}); the run "
                 "is graded as an error of the submission. If your kernel only returns its output, tell your "
                 "course staff: they can regrade it"),
        details={"exception": type(exc).__name__, "text": str(exc)[:500]})
