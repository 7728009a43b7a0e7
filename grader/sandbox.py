"""Run one untrusted child process: bubblewrap, scrubbed environment, limits, capped output.

The child sees: the Python installation and toolchain paths read-only, its work folder
read-write, the GPU device files when it runs on CUDA, a private /tmp (tmpfs, size-capped)
holding its own Triton cache, and nothing else: no network (new network namespace), no view
of the service's data, database or other submissions, no inherited environment. Limits:
wall clock (SIGKILL of the whole sandbox), host memory and process count (a cgroup when this
process may create one, else rlimits plus a resident-set watchdog), captured output kept as
head and tail, and a child that prints without end is killed.

Raises ``SandboxUnavailable`` when bubblewrap is asked for but cannot run; the caller reports
that as an infrastructure error, never as a verdict. Which bwrap runs: grader/bwrap.py.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from grader.bwrap import SandboxUnavailable, resolve_bwrap
from grader.harness.protocol import CompileMark
from grader.openmp import OMP_WAIT_POLICY
from grader.settings import GraderSettings
from grader.stages import GradingStage, report_stage

# Packages of this project that must never be visible to the child (the reference solution
# lives in grader/assignments/). Masked with an empty tmpfs if they sit inside a bound path.
_PROJECT_PACKAGES = ("grader", "api", "submissions")
_ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
)
# Driver files outside /usr (which is bound whole); /usr/local/nvidia and /usr/local/cuda come
# with /usr, and binding over them fails where they are symlinks (seen on the H200 machine).
_GPU_PATHS = ("/run/nvidia-persistenced", "/usr/lib/wsl", "/opt/nvidia")
_ENV_PASSTHROUGH = ("LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_HOME")


@dataclass
class CapturedLog:
    """Child stdout+stderr: the first and last ``cap/2`` bytes, how much there was and how much
    of it is not in ``text`` (bytes)."""

    text: str
    truncated: bool
    total_bytes: int
    omitted_bytes: int = 0

    def as_json(self) -> dict:
        return {"text": self.text, "truncated": self.truncated, "total_bytes": self.total_bytes,
                "omitted_bytes": self.omitted_bytes}


@dataclass
class ChildOutcome:
    """How the untrusted child ended.

    Attributes:
        returncode: exit status (negative: killed by that signal), None if never started.
        timed_out: killed at the wall-clock limit.
        memory_exceeded: killed (or OOM-killed) for passing the memory limit.
        output_exceeded: killed for printing more than ``output_kill_bytes``.
        log: captured output.
        duration_s: wall time from start to exit, seconds.
        limits: what was enforced and how, for the result document.
        signal: the signal that ended the child (bubblewrap reports its child's signal death
            as exit status 128 + N; that is translated here), or None.
        process_limit_hit: a fork or thread creation was refused by the process limit.
        progress: lines the harness wrote to its progress pipe (when asked for).
        compile_s: wall time the parent saw the child compiling (between ``compile begin`` and
            ``compile end`` lines on its progress pipe), seconds.
        compile_excluded_s: the part of it left out of the wall-clock limit (at most the
            compile budget), seconds.
        compile_budget_exhausted: the child kept claiming to compile past the budget.
        cancelled: killed because the parent's ``cancel`` event was set (its outcome is not
            evidence of anything).
        started: ``time.monotonic()`` when the child was started (the origin of
            ``progress.marks``).
        cpu_s: CPU seconds (user + system) of the child's processes counted against its limit
            (CpuClock; a child started ahead of its job counts from its plan), or None where the
            limit is wall time (GPU runs).
        timeout_clock: ``"cpu"`` (the CPU-time limit) or ``"wall"`` (the wall-clock limit, or
            on the CPU the wall-clock ceiling) when ``timed_out``, else None.
        running: when the child ended, what it was doing (the last progress line) and for how
            long: {"line", "wall_s", "cpu_s"} (cpu_s None without a CPU clock); None without
            progress lines.
        load: the machine when the child ended: {"load_1min", "cores", "child_cpu_share" (its
            CPU seconds per wall second since it started), "loaded"} (``machine_load``).
        first_call_timed_out: killed because its first call did not return within
            ``first_call_limit_s`` (``timed_out`` is set too).
    """

    returncode: int | None
    timed_out: bool
    memory_exceeded: bool
    output_exceeded: bool
    log: CapturedLog
    duration_s: float
    limits: dict = field(default_factory=dict)
    signal: int | None = None
    process_limit_hit: bool = False
    progress: ProgressLines | None = None
    compile_s: float = 0.0
    compile_excluded_s: float = 0.0
    compile_budget_exhausted: bool = False
    cancelled: bool = False
    started: float | None = None
    cpu_s: float | None = None
    timeout_clock: str | None = None
    running: dict | None = None
    load: dict | None = None
    first_call_timed_out: bool = False


class _OutputCapture(threading.Thread):
    """Reads a pipe to its end, keeping head and tail; flags runaway output."""

    def __init__(self, pipe, cap_bytes: int, kill_bytes: int, on_runaway) -> None:
        super().__init__(daemon=True)
        self.pipe = pipe
        self.half = max(cap_bytes // 2, 1)
        self.kill_bytes = kill_bytes
        self.on_runaway = on_runaway
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.runaway = False

    def run(self) -> None:
        while True:
            chunk = self.pipe.read1(65536) if hasattr(self.pipe, "read1") else self.pipe.read(65536)
            if not chunk:
                break
            self.total += len(chunk)
            room = self.half - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                self.tail += chunk
                if len(self.tail) > self.half:
                    del self.tail[: len(self.tail) - self.half]
            if self.total > self.kill_bytes and not self.runaway:
                self.runaway = True
                self.on_runaway()

    def result(self) -> CapturedLog:
        kept = len(self.head) + len(self.tail)
        truncated = self.total > kept
        text = self.head.decode("utf-8", "replace")
        if truncated:
            text += f"\n[... {self.total - kept} bytes of output dropped ...]\n"
        text += self.tail.decode("utf-8", "replace")
        return CapturedLog(text=text, truncated=truncated, total_bytes=self.total, omitted_bytes=self.total - kept)


#: Most compilations one child's report keeps (the rest are counted).
MAX_COMPILE_RECORDS = 256
#: Progress lines with which the harness brackets a Triton compilation (check_child.py).
COMPILE_BEGIN = "compile begin"
#: The line of a check child started ahead of its job when its plan arrived (check_child.py).
PLAN_RECEIVED = "plan"
COMPILE_END = "compile end"


def _phase_mark(line: str) -> str | None:
    """The phase a progress line starts (see ``ProgressLines.marks``), or None."""
    if line in ("import", "precompile", "done"):
        return line
    if line.startswith("call benchmark "):
        return "benchmark"
    return "call" if line.startswith("call ") else None


#: Progress marks of the main check child -> the grading stage they start.
_STAGE_OF_MARK = {"precompile": GradingStage.COMPILING, "call": GradingStage.CHECKS}


class ProgressLines(threading.Thread):
    """Reads the child's progress pipe: the first line, the last line, whether ``done`` came,
    and how long the child spent compiling.

    The harness writes ``import`` before any submission code runs, so ``first == "import"``
    proves that the harness started, ``precompile`` before its compile-only pass, and
    ``call <id>`` before each call (``calls_started`` counts them); the submission can append
    lines but not remove them.
    ``compile begin`` / ``compile end`` lines (written by the harness around each Triton
    compilation) are timed here, by this process's clock when they arrive: nothing the child
    says about durations is believed, and ``last`` ignores them (it names the last call).
    At most ``cap_bytes`` are parsed; the rest is drained and dropped.
    """

    def __init__(self, fd: int, cap_bytes: int = 1 << 20, *, reports_stages: bool = False) -> None:
        super().__init__(daemon=True)
        self.fd = fd
        #: The main check child's: its ``precompile`` and first ``call`` lines move the grading's
        #: stage (grader/stages.py) to compiling and checks, a label for the student only.
        self.reports_stages = reports_stages
        self.cap_bytes = cap_bytes
        self.first: str | None = None
        self.last: str | None = None
        #: monotonic time (this process's clock) the ``last`` line arrived.
        self.last_at: float | None = None
        self.done = False
        self.calls_started = 0
        self._lock = threading.Lock()
        self._compile_closed_s = 0.0
        self._compiling_since: float | None = None
        self._depth = 0
        #: Triton compilations announced by ``compiling <n> {...}`` / ``compiled <n> {...}``
        #: lines (check_child.py report_each_compilation; protocol.CompileMark), timed by this
        #: process's clock: finished ones (at most MAX_COMPILE_RECORDS) and those still open.
        self.compilations: list[dict] = []
        self.compilations_dropped = 0
        self._open_compilations: dict[str, dict] = {}
        #: phase -> monotonic time (this process's clock) its first line arrived: ``import``,
        #: ``precompile``, ``call`` (the first check call), ``benchmark`` (the first benchmark
        #: row's call), ``done``. Diagnostics of where a child's time went, never evidence.
        self.marks: dict[str, float] = {}
        #: (line, arrival time, compile seconds then) of the first ``call`` line.
        self._first_call: tuple[str, float, float] | None = None

    def _compile_event(self, line: str, now: float) -> None:
        with self._lock:
            if line == COMPILE_BEGIN:
                if self._depth == 0:
                    self._compiling_since = now
                self._depth += 1
            elif self._depth > 0:
                self._depth -= 1
                if self._depth == 0 and self._compiling_since is not None:
                    self._compile_closed_s += now - self._compiling_since
                    self._compiling_since = None

    def compile_seconds(self, now: float | None = None) -> float:
        """Seconds the child has spent between compile begin and end so far (an open
        compilation counts up to ``now``, default: the current monotonic time)."""
        with self._lock:
            total = self._compile_closed_s
            if self._compiling_since is not None:
                total += (time.monotonic() if now is None else now) - self._compiling_since
            return total

    def _compile_mark(self, line: str, now: float) -> None:
        """A ``compiling``/``compiled`` line: open or close that compilation's record."""
        word, _, rest = line.partition(" ")
        number, _, text = rest.partition(" ")
        try:
            mark = CompileMark.model_validate_json(text or "{}")
        except ValueError:
            return
        with self._lock:
            if word == "compiling":
                if len(self._open_compilations) < MAX_COMPILE_RECORDS:
                    self._open_compilations[number] = {**mark.model_dump(include={"kernel", "constants", "num_warps",
                                                                                  "num_stages"}), "started": now}
                return
            entry = self._open_compilations.pop(number, None)
            if entry is None:
                return
            entry.update(seconds=round(now - entry.pop("started"), 3), rss_bytes=mark.rss_bytes,
                         peak_rss_bytes=mark.peak_rss_bytes, tree_peak_bytes=mark.tree_peak_bytes)
            if len(self.compilations) < MAX_COMPILE_RECORDS:
                self.compilations.append(entry)
            else:
                self.compilations_dropped += 1

    def compile_report(self, now: float | None = None) -> list[dict]:
        """Every compilation seen, the longest first: the finished ones, and those still open
        (``open``: True; ``seconds`` so far, by ``now``). Each: kernel, constants (constexpr
        arguments by name: block sizes), num_warps, num_stages, seconds, and after a finished
        one the child's resident and peak resident bytes as it reported them."""
        now = time.monotonic() if now is None else now
        with self._lock:
            report = [dict(entry) for entry in self.compilations]
            for entry in self._open_compilations.values():
                opened = {k: v for k, v in entry.items() if k != "started"}
                report.append({**opened, "seconds": round(now - entry["started"], 3), "open": True})
        return sorted(report, key=lambda entry: -entry["seconds"])

    @property
    def compiling(self) -> bool:
        """A compilation was announced and has not ended."""
        with self._lock:
            return self._depth > 0

    def run(self) -> None:
        buffered = b""
        seen = 0
        with os.fdopen(self.fd, "rb", buffering=0) as pipe:
            while True:
                chunk = pipe.read(65536)
                if not chunk:
                    break
                now = time.monotonic()
                if seen > self.cap_bytes:
                    continue
                seen += len(chunk)
                buffered += chunk
                *lines, buffered = buffered.split(b"\n")
                for raw in lines:
                    line = raw.decode("utf-8", "replace").strip()[:500]
                    if not line:
                        continue
                    if line == PLAN_RECEIVED:  # a child started ahead got its plan: not a phase of its run
                        self.marks.setdefault("plan", now)
                        continue
                    if line.startswith(("compiling ", "compiled ")):  # what a compilation is of and cost
                        self._compile_mark(line, now)
                        continue
                    if self.first is None:
                        self.first = line
                    if line in (COMPILE_BEGIN, COMPILE_END):
                        self._compile_event(line, now)
                        continue
                    self.last = line
                    self.last_at = now
                    if line.startswith("call "):
                        self.calls_started += 1
                        if self._first_call is None:
                            self._first_call = (line, now, self.compile_seconds(now))
                    if line == "done":
                        self.done = True
                    mark = _phase_mark(line)
                    if mark is not None and mark not in self.marks:
                        self.marks[mark] = now
                        if self.reports_stages and mark in _STAGE_OF_MARK:
                            report_stage(_STAGE_OF_MARK[mark])
        # The pipe closed (the child exited or was killed) inside a compilation: it ended now.
        while self.compiling:
            self._compile_event(COMPILE_END, time.monotonic())

    @property
    def started(self) -> bool:
        return self.first == "import"

    def first_call_running_s(self, now: float | None = None) -> float | None:
        """Seconds the first call has run so far, compile time left out, while it is the
        last line (it has not returned: no later call and no ``done``); None before it starts
        and after it returned."""
        first = self._first_call
        if first is None or self.calls_started != 1 or self.last != first[0] or self.done:
            return None
        now = time.monotonic() if now is None else now
        return (now - first[1]) - (self.compile_seconds(now) - first[2])


class WallClock:
    """The child's time limit: ``limit_s`` of wall time, not counting time spent compiling
    (as seen on the progress pipe) up to ``compile_budget_s``.

    So Triton compilation never decides a verdict within the budget, and a child that claims
    to compile forever is still stopped: at most ``limit_s + compile_budget_s`` in all.
    """

    def __init__(self, limit_s: float, compile_budget_s: float, progress: ProgressLines | None,
                 idle_s: Callable[[float], float] | None = None) -> None:
        self.limit_s = limit_s
        self.compile_budget_s = compile_budget_s if progress is not None else 0.0
        self.progress = progress
        self.idle_s = idle_s
        self.started = time.monotonic()

    def excluded_s(self, now: float) -> float:
        """Seconds not counted against ``limit_s``: compile time within the budget, plus the
        parent-reported idle time (``idle_s``) of a trusted process waiting for its work."""
        idle = self.idle_s(now) if self.idle_s is not None else 0.0
        if self.progress is None or self.compile_budget_s <= 0:
            return idle
        return idle + min(self.progress.compile_seconds(now), self.compile_budget_s)

    def remaining_s(self, now: float | None = None) -> float:
        """Seconds left before the child must be stopped (<= 0: stop it now)."""
        now = time.monotonic() if now is None else now
        return self.limit_s + self.excluded_s(now) - (now - self.started)

    def budget_exhausted(self, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        return (self.progress is not None and self.compile_budget_s > 0
                and self.progress.compile_seconds(now) > self.compile_budget_s)


def tree_cpu_seconds(pid: int) -> tuple[float, float] | None:
    """(CPU seconds, run-queue seconds) of process ``pid`` and its descendants, or None when
    the process is gone (or psutil is missing).

    CPU seconds: user + system of the living processes, and through their parents'
    ``children_*`` times, of those that ended and were reaped. Run-queue seconds: how long the
    busiest process's main thread was ready to run but waited for a CPU (the second field of
    Linux's ``/proc/<pid>/schedstat``, nanoseconds; 0 where the kernel does not keep it): time
    the machine's load took from the child, not time the child spent."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency of the grader extra
        return None
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0.0
    busiest, most = None, -1.0
    for process in tree:
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system + times.children_user + times.children_system
        if times.user + times.system > most:
            busiest, most = process.pid, times.user + times.system
    waited = 0.0
    if busiest is not None:
        try:
            with open(f"/proc/{busiest}/schedstat", encoding="ascii") as handle:
                waited = int(handle.read().split()[1]) / 1e9
        except (OSError, ValueError, IndexError):
            waited = 0.0
    return total, waited


def machine_load(cpu_s: float | None, wall_s: float) -> dict:
    """How loaded the machine was for a child that ran ``wall_s`` seconds and got ``cpu_s`` CPU
    seconds: the 1-minute load average, the cores this process may run on, the child's share
    of one core, and ``loaded``: the load average is above the core count, or the child got
    less than 80% of a core while it ran (a child that waits or sleeps gets little too, so the
    load average decides alone when it is below the core count and the share is high)."""
    try:
        load = os.getloadavg()[0]
    except OSError:  # pragma: no cover - no load average on this system
        load = None
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    share = cpu_s / wall_s if cpu_s is not None and wall_s > 0 else None
    loaded = (load is not None and load > cores) or (share is not None and share < 0.8 and load is not None
                                                     and load > 0.8 * cores)
    return {"load_1min": None if load is None else round(load, 2), "cores": cores,
            "child_cpu_share": None if share is None else round(share, 3), "loaded": bool(loaded)}


class CpuClock:
    """The time limit of a child on the CPU interpreter: ``limit_s`` CPU seconds (user +
    system, of all its processes), sampled by the parent (``tree_cpu_seconds``), so that a
    child slowed by other work on the machine is not stopped sooner than one on a quiet
    machine (issue 22: the same file got ``timeout at 180 s`` under load and a verdict in 60 s
    alone). A child started ahead of its job counts from its ``plan`` line (its wait and its
    start-up, like its wall time, are not its job's). The wall clock stays as a ceiling
    (WallClock with a multiple of the limit, ``cpu_wall_ceiling_factor``): a child that sleeps
    or blocks uses no CPU. The ceiling leaves out the time the child waited for a CPU
    (``idle_s``: run-queue time), so that it stops a child that waits, never one the load
    slowed.

    Samples are kept (parent's monotonic time, CPU seconds) to tell what a call cost: the CPU
    seconds since a time are interpolated between the samples around it.
    """

    def __init__(self, pid: int, limit_s: float, progress: ProgressLines | None, started: float) -> None:
        """``started``: ``time.monotonic()`` when the child was started (it had used no CPU)."""
        self.pid = pid
        self.limit_s = limit_s
        self.progress = progress
        self.samples: list[tuple[float, float]] = [(started, 0.0)]
        #: seconds the child was ready to run but waited for a CPU (``tree_cpu_seconds``), as
        #: of the last sample: the wall-clock ceiling leaves them out (``idle_s``).
        self.waited_s = 0.0
        self._base: float | None = None

    def sample(self, now: float) -> float:
        """Read the child's CPU seconds now (the last value if it cannot be read)."""
        read = tree_cpu_seconds(self.pid)
        last = self.samples[-1][1]
        cpu = last if read is None else max(read[0], last)
        if read is not None:
            self.waited_s = max(self.waited_s, read[1])
        if now > self.samples[-1][0]:
            self.samples.append((now, cpu))
            if len(self.samples) > 4096:  # over an hour at one sample a second: keep every other
                self.samples = self.samples[:1] + self.samples[2::2]
        return cpu

    def at(self, when: float) -> float:
        """CPU seconds the child had used at monotonic time ``when`` (interpolated)."""
        if when <= self.samples[0][0]:
            return self.samples[0][1]
        for (t0, c0), (t1, c1) in zip(self.samples, self.samples[1:]):
            if t0 <= when <= t1:
                return c0 + (c1 - c0) * ((when - t0) / (t1 - t0) if t1 > t0 else 1.0)
        return self.samples[-1][1]

    def base(self) -> float:
        """CPU seconds not counted: those before a started-ahead child's ``plan`` line."""
        if self._base is None:
            plan = self.progress.marks.get(PLAN_RECEIVED) if self.progress is not None else None
            if plan is None:
                return 0.0
            self._base = self.at(plan)
        return self._base

    def used_s(self) -> float:
        """CPU seconds counted against the limit so far (at the last sample)."""
        return max(0.0, self.samples[-1][1] - self.base())

    def idle_s(self, now: float) -> float:
        """For the wall-clock ceiling (WallClock's ``idle_s``): the seconds the child waited
        for a CPU, so that the ceiling measures time the child ran or slept, never the load."""
        return self.waited_s

    def remaining_s(self, now: float) -> float:
        """CPU seconds left (<= 0: stop the child), after a new sample."""
        self.sample(now)
        return self.limit_s - self.used_s()


#: A first call that has not returned after this many times its CPU-second limit of wall time
#: (compile time left out) is stopped too: one blocked without using the CPU.
FIRST_CALL_WALL_FACTOR = 2.0


class _FirstCallWatch:
    """Whether the child's first call ran past its limit: ``limit_s`` CPU seconds of the
    child's process tree while that call runs (CPU time, not wall time, so that a loaded
    machine never stops an honest call: the first call on a 1x2 input takes well under a
    second of CPU, on the CPU interpreter too, however long it waits for a core), or
    ``FIRST_CALL_WALL_FACTOR`` x ``limit_s`` of wall time. Time spent compiling Triton kernels
    (the progress pipe's ``compile begin``/``end``) is left out of both. Sampled by the
    parent's wait loop (every 0.25 s)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.cpu_at_start: float | None = None
        self.cpu_excluded = 0.0
        self.last_cpu: float | None = None

    def _tree_cpu_s(self) -> float | None:
        read = tree_cpu_seconds(self.pid)
        return None if read is None else read[0]

    def over(self, progress: ProgressLines, limit_s: float) -> bool:
        running = progress.first_call_running_s()
        if running is None:
            return False
        cpu = self._tree_cpu_s()
        if cpu is None:
            return running > FIRST_CALL_WALL_FACTOR * limit_s
        if self.cpu_at_start is None:
            self.cpu_at_start = cpu
        elif progress.compiling and self.last_cpu is not None:
            self.cpu_excluded += cpu - self.last_cpu
        self.last_cpu = cpu
        used = cpu - self.cpu_at_start - self.cpu_excluded
        return used > limit_s or running > FIRST_CALL_WALL_FACTOR * limit_s


class _Cgroup:
    """A cgroup (v1 or v2) with pids and memory limits, used when this process may make one."""

    def __init__(self, memory_bytes: int, max_processes: int) -> None:
        self.paths: list[Path] = []
        self.kind = "none"
        name = f"grader-{uuid.uuid4().hex[:12]}"
        v1 = Path("/sys/fs/cgroup/pids")
        v2 = Path("/sys/fs/cgroup/cgroup.controllers")
        try:
            if v1.is_dir() and os.access(v1, os.W_OK):
                pids = v1 / name
                pids.mkdir()
                self.paths.append(pids)
                (pids / "pids.max").write_text(str(max_processes))
                memory_root = Path("/sys/fs/cgroup/memory")
                if memory_root.is_dir() and os.access(memory_root, os.W_OK):
                    memory = memory_root / name
                    memory.mkdir()
                    self.paths.append(memory)
                    (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
                    swap = memory / "memory.memsw.limit_in_bytes"
                    if swap.exists():
                        try:
                            swap.write_text(str(memory_bytes))
                        except OSError:
                            pass
                    self.kind = "cgroup-v1 pids+memory"
                else:
                    self.kind = "cgroup-v1 pids"
            elif v2.exists():
                own = Path("/proc/self/cgroup").read_text().strip().splitlines()[-1].split(":", 2)[2]
                parent = Path("/sys/fs/cgroup") / own.lstrip("/")
                controllers = (parent / "cgroup.subtree_control").read_text().split()
                if "pids" in controllers and "memory" in controllers and os.access(parent, os.W_OK):
                    group = parent / name
                    group.mkdir()
                    self.paths.append(group)
                    (group / "pids.max").write_text(str(max_processes))
                    (group / "memory.max").write_text(str(memory_bytes))
                    (group / "memory.swap.max").write_text("0")
                    self.kind = "cgroup-v2 pids+memory"
        except OSError:
            self.remove()
            self.kind = "none"

    @property
    def limits_memory(self) -> bool:
        return "memory" in self.kind

    @property
    def limits_processes(self) -> bool:
        return "pids" in self.kind

    def enter(self) -> None:
        """Move the calling process into every group (runs in the child before exec)."""
        for path in self.paths:
            (path / "cgroup.procs").write_text(str(os.getpid()))

    def oom_killed(self) -> bool:
        for path in self.paths:
            for name in ("memory.events", "memory.oom_control"):
                events = path / name
                if events.exists():
                    text = events.read_text()
                    for line in text.splitlines():
                        key, _, value = line.partition(" ")
                        if key == "oom_kill" and value.strip() not in ("0", ""):
                            return True
            failcnt = path / "memory.failcnt"
            if failcnt.exists() and failcnt.read_text().strip() not in ("0", ""):
                return True
        return False

    def process_limit_hit(self) -> bool:
        """True when the pids controller refused a fork (``pids.events``: ``max N`` with N > 0)."""
        for path in self.paths:
            events = path / "pids.events"
            if events.exists():
                for line in events.read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "max" and value.strip() not in ("", "0"):
                        return True
        return False

    def kill_all(self) -> None:
        for path in self.paths:
            procs = path / "cgroup.procs"
            try:
                for pid in procs.read_text().split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except ProcessLookupError:
                        pass
            except OSError:
                pass

    def remove(self) -> None:
        for path in reversed(self.paths):
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except OSError:
                    self.kill_all()
                    time.sleep(0.02)
        self.paths = []


def _tasks_of_uid(uid: int) -> int:
    """Tasks (threads included) of ``uid`` visible in /proc: what RLIMIT_NPROC counts.

    Tasks of the same uid in other PID namespaces (other containers) are invisible here but
    counted by the kernel; docs/deployment.md gives each worker its own uid for that reason.
    """
    total = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
        except OSError:
            continue
        if fields.get("Uid", "").split()[:1] == [str(uid)]:
            total += int(fields.get("Threads", "1").strip() or 1)
    return total


def _python_paths() -> list[str]:
    """Folders the child's Python needs: the installation prefixes, the standard library,
    site-packages and the C headers (Triton builds its launcher against them).

    Deliberately not every entry of ``sys.path``: PYTHONPATH, the grader's own script folder
    or a test runner's folders may hold files a submission must not read.
    """
    import site

    schemes = sysconfig.get_paths()
    candidates = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
        *(schemes.get(key, "") for key in ("stdlib", "platstdlib", "purelib", "platlib", "include", "platinclude")),
        *site.getsitepackages(),
    }
    kept = []
    for path in sorted({os.path.realpath(p) for p in candidates if p}):
        if not os.path.isdir(path) or path in ("/", "/usr", "/root", "/home", "/tmp", "/opt"):
            continue
        if path.startswith("/usr/"):
            continue  # bound with /usr
        kept.append(path)
    # Drop paths already inside another kept path.
    return [p for p in kept if not any(p != q and p.startswith(q + os.sep) for q in kept)]


def _masked_package_dirs(bound: list[str]) -> list[str]:
    masks = []
    for root in bound:
        for pkg in _PROJECT_PACKAGES:
            candidate = os.path.join(root, pkg)
            if os.path.isdir(candidate) and os.path.isfile(os.path.join(candidate, "__init__.py")):
                masks.append(candidate)
    return masks


def build_environment(*, device: str, home: str, cache_dir: str | None = None) -> dict[str, str]:
    """The child's whole environment: an allow-list, never a copy of ours.

    Secrets (database URL, tokens, deployment seed) cannot reach the child because nothing
    outside this list is passed.
    """
    env = {
        "PATH": os.pathsep.join(dict.fromkeys([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"])),
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONNOUSERSITE": "1",
        "TRITON_CACHE_DIR": cache_dir or os.path.join(home, "triton-cache"),
        "TORCHINDUCTOR_CACHE_DIR": os.path.join(home, "inductor-cache"),
        "OMP_WAIT_POLICY": OMP_WAIT_POLICY,  # idle OpenMP threads sleep (grader/openmp.py)
    }
    for name in _ENV_PASSTHROUGH:
        if name in os.environ:
            env[name] = os.environ[name]
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _bwrap_command(
    *, python: str, harness: Path, workdir: Path, device: str, settings: GraderSettings, args: list[str], cache_dir: Path | None
) -> list[str]:
    binary = resolve_bwrap(settings).path  # raises SandboxUnavailable, with the reason and the fix
    command = [
        binary,
        "--unshare-all",  # user, ipc, pid, net, uts, cgroup namespaces: no network at all
        "--die-with-parent",
        "--new-session",
        "--cap-drop", "ALL",
        "--uid", "65534",
        "--gid", "65534",
        "--hostname", "sandbox",
        "--proc", "/proc",
        "--dev", "/dev",
        "--size", str(settings.tmpfs_bytes),
        "--tmpfs", "/tmp",
        "--ro-bind", "/usr", "/usr",
    ]
    for link in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(link):
            command += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            command += ["--ro-bind", link, link]
    for path in _ETC_FILES:
        command += ["--ro-bind-try", path, path]
    bound = _python_paths()
    for path in bound:
        command += ["--ro-bind", path, path]
    for path in _masked_package_dirs(bound):
        command += ["--tmpfs", path, "--remount-ro", path]
    if device.startswith("cuda"):
        for path in _GPU_PATHS:
            if os.path.islink(path):
                command += ["--symlink", os.readlink(path), path]
            elif os.path.exists(path) and not path.startswith("/usr/"):
                command += ["--ro-bind", path, path]
        command += ["--ro-bind-try", "/sys", "/sys"]
        for name in sorted(os.listdir("/dev")):
            if name.startswith("nvidia"):
                command += ["--dev-bind", f"/dev/{name}", f"/dev/{name}"]
    command += ["--bind", str(workdir), str(workdir)]
    if cache_dir is not None:
        command += ["--bind", str(cache_dir), str(cache_dir)]
    command += ["--ro-bind", str(harness.parent), "/harness"]
    command += ["--chdir", str(workdir), "--", python, "-I", "/harness/" + harness.name, *args]
    return command


HARNESS_SOURCE = Path(__file__).resolve().parent / "harness"


def stage_harness(destination: Path, extra_files: dict[str, Path] | None = None) -> Path:
    """Copy the harness scripts (grader/harness/*.py) and ``extra_files`` (name in the folder ->
    source file, e.g. an assignment's bench.py as ``assignment_bench.py``) into ``destination``,
    a folder private to one run, which the sandbox binds read-only at /harness.

    Only these files are visible to a child of the grader's code: never the ``grader`` package
    (which holds the reference solutions).

    Returns:
        ``destination``.
    """
    destination.mkdir(parents=True, exist_ok=True)
    for source in sorted(HARNESS_SOURCE.glob("*.py")):
        if source.name != "__init__.py":
            shutil.copyfile(source, destination / source.name)
    for name, source in (extra_files or {}).items():
        shutil.copyfile(source, destination / name)
    return destination


def run_sandboxed(
    *,
    harness: Path,
    workdir: Path,
    device: str,
    settings: GraderSettings,
    args: list[str],
    cache_dir: Path | None = None,
    progress: bool = False,
    compile_budget_s: float = 0.0,
    idle_s: Callable[[float], float] | None = None,
    cancel: threading.Event | None = None,
    first_call_limit_s: float | None = None,
    reports_stages: bool = False,
) -> ChildOutcome:
    """Run ``python -I harness args...`` as the untrusted child and wait for it.

    Args:
        harness: the script to run, inside a folder made by ``stage_harness`` (that folder is
            bound read-only at /harness; nothing else of the grader is visible).
        workdir: folder bound read-write at the same path; the submission and the inputs are
            in it, the child writes its outputs there. Must be private to this run.
        device: ``"cpu"`` (sets TRITON_INTERPRET=1 in the child only) or ``"cuda"``.
        settings: limits and sandbox choice.
        args: arguments for the harness.
        progress: open a pipe for the harness's progress lines and append its file
            descriptor number to ``args`` (see ProgressLines).
        compile_budget_s: with ``progress``, time the child spends compiling (``compile
            begin``/``compile end`` on the pipe) is left out of ``settings.child_timeout_s`` up to
            this many seconds (WallClock); 0 counts compile time like any other.
        idle_s: for a trusted process the parent feeds work over time (the replay process):
            ``idle_s(now)`` is how long, in seconds of ``time.monotonic()``, it has waited for
            that work so far; that time is left out of ``settings.child_timeout_s``. The
            parent decides it, never the process.
        cancel: when set, the child is killed (within a second) and its outcome says
            ``cancelled``: the parent no longer needs it (e.g. the isolated child beside a main
            child that ended with an error).
        first_call_limit_s: with ``progress``, the child is stopped when its first call (the
            plan's first, smallest input) has not returned after this many CPU seconds (or
            ``FIRST_CALL_WALL_FACTOR`` times as many wall seconds), compile time left out
            (``_FirstCallWatch``): a kernel that never returns ends in seconds, not at
            ``child_timeout_s``. None: no such limit.
        reports_stages: with ``progress``, the child's progress moves the grading's stage
            (grader/stages.py): the main check child's, not the isolated one's.
        cache_dir: the submission's own Triton cache folder, bound read-write, so the check run
            and the benchmark run of one grading compile each kernel once. Never shared between
            submissions (a shared cache could be poisoned). None: a fresh one in the child's /tmp.

    Returns:
        ChildOutcome; it never raises for anything the child does.

    Raises:
        SandboxUnavailable: bubblewrap required but none works (grader/bwrap.py).
    """
    home = "/tmp"
    python = sys.executable
    use_bwrap = settings.sandbox == "bwrap"
    progress_read = progress_write = None
    if progress:
        progress_read, progress_write = os.pipe()
        args = [*args, str(progress_write)]
    if use_bwrap:
        command = _bwrap_command(
            python=python, harness=harness, workdir=workdir, device=device, settings=settings, args=args, cache_dir=cache_dir
        )
    else:
        home = str(workdir / ".home")
        os.makedirs(home, exist_ok=True)
        command = [python, "-I", str(harness), *args]
    env = build_environment(device=device, home=home, cache_dir=str(cache_dir) if cache_dir is not None else None)
    cgroup = _Cgroup(settings.memory_limit_bytes, settings.max_processes) if os.geteuid() == 0 else None
    limits = {
        "wall_s": settings.child_timeout_s,
        "compile_budget_s": compile_budget_s if progress else 0.0,
        "memory_bytes": settings.memory_limit_bytes,
        "max_processes": settings.max_processes,
        "enforced_by": [],
    }

    # RLIMIT_NPROC counts every task (thread) of this uid, so allow for those running now.
    # Counted here, before the fork: the child between fork and exec must stay minimal.
    nproc_cap = _tasks_of_uid(os.getuid()) + settings.max_processes

    def limit_child() -> None:  # runs in the forked child, before exec
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        file_cap = max(settings.memory_limit_bytes, 1024**3)
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_cap, file_cap))
        if cgroup is not None and cgroup.kind != "none":
            cgroup.enter()
        if cgroup is None or not cgroup.limits_processes:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc_cap, nproc_cap))
        if device == "cpu" and (cgroup is None or not cgroup.limits_memory):
            # Address-space limit only without CUDA: the CUDA driver reserves huge virtual ranges.
            resource.setrlimit(resource.RLIMIT_AS, (settings.memory_limit_bytes, settings.memory_limit_bytes))

    if cgroup is not None and cgroup.kind != "none":
        limits["enforced_by"].append(cgroup.kind)
    else:
        limits["enforced_by"].append("rlimit" + (" AS" if device == "cpu" else "") + " NPROC")
    if cgroup is None or not cgroup.limits_memory:
        limits["enforced_by"].append("rss-watchdog")

    started = time.monotonic()
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(workdir),
            start_new_session=True,
            # Not thread-unsafe here: limit_child only calls setrlimit and writes a cgroup file
            # (no import, no lock another thread of the grader could hold at fork time).
            preexec_fn=limit_child,  # noqa: PLW1509
            close_fds=True,
            pass_fds=(progress_write,) if progress_write is not None else (),
        )
    except OSError as exc:
        if cgroup is not None:
            cgroup.remove()
        for fd in (progress_read, progress_write):
            if fd is not None:
                os.close(fd)
        raise SandboxUnavailable(f"could not start the sandboxed child: {exc}") from exc
    progress_lines = None
    if progress_write is not None:
        os.close(progress_write)  # the child holds the only write end now
        progress_lines = ProgressLines(progress_read, reports_stages=reports_stages)
        progress_lines.start()

    killed_for: list[str] = []

    def kill(reason: str) -> None:
        if not killed_for:
            killed_for.append(reason)
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if cgroup is not None:
            cgroup.kill_all()

    capture = _OutputCapture(process.stdout, settings.log_cap_bytes, settings.output_kill_bytes, lambda: kill("output"))
    capture.start()
    watchdog_stop = threading.Event()

    def watch_memory() -> None:
        try:
            import psutil
        except ImportError:  # pragma: no cover - psutil is a dependency of the grader extra
            return
        try:
            root = psutil.Process(process.pid)
        except psutil.Error:
            return
        while not watchdog_stop.wait(0.1):
            try:
                tree = [root, *root.children(recursive=True)]
                rss = sum(p.memory_info().rss for p in tree if p.is_running())
            except psutil.Error:
                continue
            if rss > settings.memory_limit_bytes:
                kill("memory")
                return

    watchdog = threading.Thread(target=watch_memory, daemon=True)
    if cgroup is None or not cgroup.limits_memory:
        # Without a memory cgroup; resident sets of forked copies share pages, so this
        # over-counts a fork bomb, which the process limit stops first.
        watchdog.start()
    cpu_clock = CpuClock(process.pid, settings.child_timeout_s, progress_lines, started) if device == "cpu" else None
    ceiling = settings.child_timeout_s * (settings.cpu_wall_ceiling_factor if cpu_clock is not None else 1.0)
    if cpu_clock is not None:
        limits.update(clock="cpu", cpu_s=settings.child_timeout_s, wall_s=ceiling)
    wall_idle_s = idle_s
    if cpu_clock is not None:
        def wall_idle_s(now: float, _parent=idle_s) -> float:
            return (_parent(now) if _parent is not None else 0.0) + cpu_clock.idle_s(now)
    clock = WallClock(ceiling, compile_budget_s, progress_lines, wall_idle_s)
    clock.started = started
    timeout_clock = None
    first_call = _FirstCallWatch(process.pid)
    while True:
        remaining = clock.remaining_s()
        if remaining <= 0 or (cpu_clock is not None and cpu_clock.remaining_s(time.monotonic()) <= 0):
            timeout_clock = "wall" if remaining <= 0 else "cpu"
            kill("timeout")
            process.wait()
            break
        if cancel is not None and cancel.is_set():
            kill("cancelled")
            process.wait()
            break
        if first_call_limit_s is not None and progress_lines is not None and first_call.over(
                progress_lines, first_call_limit_s):
            kill("first_call")
            process.wait()
            break
        try:
            # Wake at least every second: compile time seen meanwhile moves the deadline, and
            # the CPU clock is sampled; four times a second while a first call is watched.
            process.wait(timeout=min(remaining, 1.0 if first_call_limit_s is None else 0.25))
            break
        except subprocess.TimeoutExpired:
            continue
    watchdog_stop.set()
    capture.join(timeout=10)
    if progress_lines is not None:
        progress_lines.join(timeout=10)
    ended = time.monotonic()
    duration = ended - started
    running = None
    if progress_lines is not None and progress_lines.last is not None and progress_lines.last_at is not None:
        since = progress_lines.last_at
        running = {"line": progress_lines.last, "wall_s": round(ended - since, 3),
                   "cpu_s": round(cpu_clock.samples[-1][1] - cpu_clock.at(since), 3) if cpu_clock is not None else None}
    cpu_s = cpu_clock.used_s() if cpu_clock is not None else None
    # The share of a core over the time the child worked (a child started ahead waited for its job).
    waited_for_work = idle_s(ended) if idle_s is not None else 0.0
    load = machine_load(cpu_clock.samples[-1][1] - cpu_clock.base() if cpu_clock is not None else None,
                        max(duration - waited_for_work, 1e-3))
    compile_s = progress_lines.compile_seconds() if progress_lines is not None else 0.0
    compile_excluded = clock.excluded_s(time.monotonic()) - (cpu_clock.waited_s if cpu_clock is not None else 0.0)
    oom = cgroup.oom_killed() if cgroup is not None else False
    pids_hit = cgroup.process_limit_hit() if cgroup is not None else False
    if cgroup is not None:
        cgroup.remove()
    returncode = process.returncode
    signal_number = None
    if returncode is not None and returncode < 0:
        signal_number = -returncode
    elif use_bwrap and returncode is not None and returncode > 128:
        signal_number = returncode - 128  # bubblewrap's PID 1 reports a signal death as 128 + N
    memory_exceeded = "memory" in killed_for or (oom and signal_number is not None)
    return ChildOutcome(
        returncode=returncode,
        timed_out="timeout" in killed_for or "first_call" in killed_for,
        first_call_timed_out="first_call" in killed_for,
        memory_exceeded=memory_exceeded,
        output_exceeded="output" in killed_for or capture.runaway,
        log=capture.result(),
        duration_s=duration,
        limits=limits,
        signal=signal_number,
        process_limit_hit=pids_hit,
        cancelled="cancelled" in killed_for,
        started=started,
        progress=progress_lines,
        compile_s=compile_s,
        compile_excluded_s=compile_excluded,
        compile_budget_exhausted=clock.budget_exhausted(),
        cpu_s=None if cpu_s is None else round(cpu_s, 3),
        timeout_clock=timeout_clock if "timeout" in killed_for else None,
        running=running,
        load=load,
    )
