"""The limits a child runs under, as the parent enforces them: the wall clock and the CPU clock
(time spent compiling left out, up to the compile budget), the first call's own short limit,
and the cgroup (memory and tasks) when this process may make one, else the task count of the
child's uid. grader/sandbox/run.py starts the child and consults these; grader/sandbox/parent_limits.py
holds the trusted parent's own.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from grader.sandbox.progress import PLAN_RECEIVED, ProgressLines

#: Seconds allowed to the trusted replay process for its start-up (Python, torch, the CUDA
#: context) and to each of its waits' slack, on top of its phases' limits (grader/runner.py;
#: the hostile hold bound of grader/sandbox/parent_limits.py counts it too).
REPLAY_STARTUP_S = 60.0


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


class FirstCallWatch:
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


class Cgroup:
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


def tasks_of_uid(uid: int) -> int:
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


#: The filesystems inside a sandbox whose files are memory (tmpfs): the private /tmp, /dev
#: (where bubblewrap's --dev puts its files) and /dev/shm (sized on its own, grader/sandbox/run.py).
SANDBOX_TMPFS_PATHS = ("/tmp", "/dev/shm", "/dev")


def held_memory_bytes(pids: list[int]) -> dict[str, int]:
    """The memory a sandboxed process tree holds in every form the parent can see without a
    memory cgroup, bytes, by kind:

    - ``resident``: the resident sets (VmRSS) of the processes (shared pages of forked copies
      counted in each; a fork bomb meets the process limit first);
    - ``memfd``: memfd files (``memfd_create``) and deleted tmpfs files the processes hold
      open, each counted once by (device, inode) from its allocated blocks: memory no resident
      set shows while it is not mapped (4 GiB in unmapped memfds passed a 3 GiB limit);
    - ``tmpfs``: the used space of the sandbox's own tmpfs mounts (``SANDBOX_TMPFS_PATHS``, seen
      through ``/proc/<pid>/root`` of a process inside the sandbox, each filesystem once).

    A cgroup's memory limit charges all three to the child already (tmpfs and memfd pages are
    charged to the memory cgroup of the writer); this is the fallback where there is none
    (grader/sandbox/run.py's watchdog). Processes that ended meanwhile are skipped.
    """
    import psutil

    resident = memfd = tmpfs = 0
    files: set[tuple[int, int]] = set()
    filesystems: set[int] = set()
    try:
        host_root = os.stat("/")
    except OSError:
        host_root = None
    for pid in pids:
        try:
            resident += psutil.Process(pid).memory_info().rss
        except psutil.Error:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            fds = []
        for fd in fds:
            path = f"/proc/{pid}/fd/{fd}"
            try:
                target = os.readlink(path)
                if not (target.startswith("/memfd:") or target.endswith(" (deleted)")):
                    continue
                info = os.stat(path)
            except OSError:
                continue
            if (info.st_dev, info.st_ino) not in files:
                files.add((info.st_dev, info.st_ino))
                memfd += info.st_blocks * 512
        try:
            root = os.stat(f"/proc/{pid}/root")
        except OSError:
            continue
        if host_root is not None and (root.st_dev, root.st_ino) == (host_root.st_dev, host_root.st_ino):
            continue  # bubblewrap's own outer process: its /tmp is the host's
        for mount in SANDBOX_TMPFS_PATHS:
            try:
                usage = os.statvfs(f"/proc/{pid}/root{mount}")
                device = os.stat(f"/proc/{pid}/root{mount}").st_dev
            except OSError:
                continue
            if device not in filesystems:
                filesystems.add(device)
                tmpfs += (usage.f_blocks - usage.f_bfree) * usage.f_frsize
    return {"resident": resident, "memfd": memfd, "tmpfs": tmpfs}
