"""Run one untrusted child process: bubblewrap, scrubbed environment, limits, capped output.

The child sees: the Python installation and toolchain paths read-only, its work folder
read-write, the GPU device files when it runs on CUDA, a private /tmp (tmpfs, size-capped)
holding its own Triton cache, and nothing else: no network (new network namespace), no view
of the service's data, database or other submissions, no inherited environment. Limits:
wall clock (SIGKILL of the whole sandbox), host memory and process count (a cgroup when this
process may create one, else rlimits plus a resident-set watchdog), captured output kept as
head and tail, and a child that prints without end is killed.

Raises ``SandboxUnavailable`` when bubblewrap is asked for but cannot run; the caller reports
that as an infrastructure error, never as a verdict. Which bwrap runs: grader/sandbox/bwrap.py.
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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.sandbox.bwrap import SandboxUnavailable, resolve_bwrap
from grader.sandbox.child_limits import (
    Cgroup,
    CpuClock,
    FirstCallWatch,
    WallClock,
    held_memory_bytes,
    machine_load,
    tasks_of_uid,
)
from grader.sandbox.openmp import OMP_WAIT_POLICY
from grader.sandbox.progress import ProgressLines
from grader.settings import GraderSettings

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
        "OMP_WAIT_POLICY": OMP_WAIT_POLICY,  # idle OpenMP threads sleep (grader/sandbox/openmp.py)
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
        # /dev/shm is a folder of bubblewrap's unsized /dev tmpfs otherwise: its own size here.
        "--size", str(settings.shm_bytes),
        "--tmpfs", "/dev/shm",
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


HARNESS_SOURCE = Path(__file__).resolve().parents[1] / "harness"


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
            (``FirstCallWatch``): a kernel that never returns ends in seconds, not at
            ``child_timeout_s``. None: no such limit.
        reports_stages: with ``progress``, the child's progress moves the grading's stage
            (grader/stages.py): the main check child's, not the isolated one's.
        cache_dir: the submission's own Triton cache folder, bound read-write, so the check run
            and the benchmark run of one grading compile each kernel once. Never shared between
            submissions (a shared cache could be poisoned). None: a fresh one in the child's /tmp.

    Returns:
        ChildOutcome; it never raises for anything the child does.

    Raises:
        SandboxUnavailable: bubblewrap required but none works (grader/sandbox/bwrap.py).
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
    cgroup = (Cgroup(settings.memory_limit_bytes, settings.max_processes)
              if os.geteuid() == 0 and settings.use_cgroup else None)
    limits: dict[str, Any] = {
        "wall_s": settings.child_timeout_s,
        "compile_budget_s": compile_budget_s if progress else 0.0,
        "memory_bytes": settings.memory_limit_bytes,
        "max_processes": settings.max_processes,
        "enforced_by": [],
    }

    # RLIMIT_NPROC counts every task (thread) of this uid, so allow for those running now.
    # Counted here, before the fork: the child between fork and exec must stay minimal.
    nproc_cap = tasks_of_uid(os.getuid()) + settings.max_processes

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
    if progress_read is not None and progress_write is not None:
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
    watch_peak: dict[str, int] = {}  # the watchdog's largest samples, bytes, by kind

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
                tree = [root.pid, *(p.pid for p in root.children(recursive=True))]
            except psutil.Error:
                continue
            # Every form the tree can hold memory in without a cgroup: resident sets, memfds
            # and deleted tmpfs files held open, the sandbox's tmpfs mounts (/tmp, /dev/shm).
            held = held_memory_bytes(tree)
            total = sum(held.values())
            watch_peak.update({key: max(watch_peak.get(key, 0), value) for key, value in
                               {**held, "total": total}.items()})
            if total > settings.memory_limit_bytes:
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
    first_call = FirstCallWatch(process.pid)
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
    if watch_peak:
        limits["watchdog_peak_bytes"] = dict(watch_peak)
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
