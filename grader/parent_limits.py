"""Limits of the grader's own process (the trusted parent), beside the sandboxed children's.

The parent reads back only capped files (grader/child_files.py) and never waits on one, so a
hostile file cannot hold it; these limits bound what is left, a bug of the grader's own:

- memory: RLIMIT_DATA (``parent_memory_bytes``) on CPU gradings;
- open files: RLIMIT_NOFILE (``parent_max_open_files``);
- wall clock: ``parent_timeout_s`` from the job's start, by ``alarm(2)``: SIGALRM's default
  action ends the process, its sandboxed children die with it (bubblewrap's
  ``--die-with-parent``), and the worker sees an infrastructure failure and retries.

Privilege: started as root, the parent stays root, because a per-child cgroup (exact memory
and process limits, OOM and refused-fork accounting; grader/child_limits.py ``Cgroup``) needs
it, and RLIMIT_NPROC, the alternative, counts every task of the uid. What root could do with
a child's file is closed by the reader's checks instead; the children themselves run as uid
65534 in user namespaces of their own with every capability dropped.
"""

from __future__ import annotations

import resource
import signal

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
    BenchmarkOptions.student_timeout_s; 0 without a benchmark). Nothing a child leaves adds to
    this: the parent reads its files without ever waiting on one (grader/child_files.py).
    """
    from grader.runner import REPLAY_STARTUP_S

    child = settings.child_timeout_s + settings.compile_budget_s
    if device == "cpu":
        return child
    return 3 * child + REPLAY_STARTUP_S + settings.child_timeout_s + benchmark_timeout_s
