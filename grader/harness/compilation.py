"""The check child's compilations (harness file, run in the sandbox; imports no grader module):
what each Triton compilation reports on the progress pipe (``compile begin``/``end``, the
``compiling``/``compiled`` marks with its kernel, block sizes and memory), the compile-only
pass's memory-gated thread pool, the loading of a compiled kernel's launcher, and autotuners
narrowed to their first config under the CPU interpreter. check_child.py installs these and
runs the pass.
"""

from __future__ import annotations

import json
import os
from typing import Protocol

# Rebound before any student code can patch the modules they come from (check_child.py imports
# this file before the submission).
_json_dumps = json.dumps
_open = open


class ProgressWriter(Protocol):
    """The progress pipe as these functions use it (check_child.Progress)."""

    def write(self, line: str) -> None: ...


def report_compilations(progress: ProgressWriter) -> None:
    """Bracket every Triton compilation with ``compile begin`` / ``compile end`` on the progress
    pipe, by wrapping ``JITFunction._do_compile`` (Triton 3.6: called on a cache miss of a
    launch, of an autotuner's benchmark run and of ``warmup``; it compiles, or loads the
    compiled kernel from the on-disk cache). The parent times the interval itself and leaves
    it out of the time limit up to the compile budget (grader/sandbox/child_limits.py WallClock). Nothing
    is compiled under the CPU interpreter."""
    import triton.runtime.jit as jit

    original = getattr(jit.JITFunction, "_do_compile", None)
    if original is None:  # pragma: no cover - another Triton version: compile time counts normally
        return

    def timed_compile(self, *args, __original=original, **kwargs):
        progress.write("compile begin")
        try:
            return __original(self, *args, **kwargs)
        finally:
            progress.write("compile end")

    jit.JITFunction._do_compile = timed_compile


def _memory_bytes() -> tuple[int, int]:
    """(resident, peak resident) bytes of this process (Linux ``/proc/self/status`` VmRSS and
    VmHWM; zeros where it cannot be read)."""
    found = {"VmRSS:": 0, "VmHWM:": 0}
    try:
        with _open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                fields = line.split()  # "VmRSS:\t  2076 kB"
                if fields and fields[0] in found:
                    found[fields[0]] = int(fields[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return found["VmRSS:"], found["VmHWM:"]


def _tree_resident_bytes() -> int:
    """Resident bytes of this process and every process it started (Linux ``/proc``: VmRSS of
    this process plus, recursively, of each task's ``children``), so that the compile-only pass's
    gate counts ptxas, which Triton runs as a subprocess for each compilation and whose memory
    ``VmRSS`` of this process leaves out. A process that exits while being read counts 0."""
    total, pending, seen = 0, [os.getpid()], set()
    while pending:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            with _open(f"/proc/{pid}/status", encoding="ascii") as handle:
                for line in handle:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
            for task in os.listdir(f"/proc/{pid}/task"):
                with _open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as handle:
                    pending.extend(int(child) for child in handle.read().split())
        except (OSError, ValueError, IndexError):
            continue
    return total


def compile_description(src, options) -> dict:
    """What a compilation is of, for its ``compiling`` progress line (``protocol.CompileMark``):
    the kernel's name, its constexpr arguments by name (block sizes among them), ``num_warps``
    and ``num_stages``."""
    fn = getattr(src, "fn", None)
    names = list(getattr(fn, "arg_names", []) or [])
    constants = {}
    # Short enough for one progress line (the parent reads 500 characters of each).
    for key, value in list((getattr(src, "constants", None) or {}).items())[:12]:
        index = key[0] if isinstance(key, tuple) and len(key) == 1 and isinstance(key[0], int) else None
        if index is not None and index < len(names) and isinstance(value, (bool, int, float, str)):
            constants[str(names[index])[:32]] = value[:24] if isinstance(value, str) else value
    options = options if isinstance(options, dict) else {}
    return {"kernel": str(getattr(src, "name", "?"))[:64], "constants": constants,
            "num_warps": options.get("num_warps"), "num_stages": options.get("num_stages")}


def report_each_compilation(progress: ProgressWriter) -> None:
    """Say on the progress pipe what each Triton compilation is and what it cost: ``compiling
    <n> {kernel, constants, num_warps, num_stages}`` before, ``compiled <n> {kernel, rss_bytes,
    peak_rss_bytes}`` after (``protocol.CompileMark``), by wrapping ``triton.compiler.compile``
    (Triton 3.6: ``JITFunction.create_binder`` binds it, so every compilation of a launch, of an
    autotuner and of the compile-only pass's worker threads goes through it). The parent times
    each one by its own clock between the two lines, and on a limit names what was compiling
    (grader/sandbox/progress.py ProgressLines.compilations)."""
    try:
        import triton.compiler as compiler
    except ImportError:  # pragma: no cover - no Triton
        return
    original = getattr(compiler, "compile", None)
    if original is None:  # pragma: no cover - another Triton version
        return
    counter = iter(range(1, 1 << 62))

    def compile_reported(src, *args, __original=original, **kwargs):
        number = next(counter)
        try:
            described = _json_dumps(compile_description(src, kwargs.get("options")), default=str)
        except Exception:  # noqa: BLE001 - a description is a diagnostic, never a failure
            described = "{}"
        progress.write(f"compiling {number} {described}")
        try:
            return __original(src, *args, **kwargs)
        finally:
            rss, peak = _memory_bytes()
            tree_peak = max(_tree_resident_bytes(), _PASS_PEAK[0].peak_bytes if _PASS_PEAK else 0)
            progress.write(f"compiled {number} " + _json_dumps({"rss_bytes": rss, "peak_rss_bytes": peak,
                                                                 "tree_peak_bytes": tree_peak}))

    compiler.compile = compile_reported


#: The compile-only pass's executor while it runs (its peak resident memory, subprocesses
#: included, goes on each ``compiled`` line).
_PASS_PEAK: list = []


class MemoryGatedExecutor:
    """A thread pool for the compile-only pass that starts a compilation only while the resident
    memory of this process and its subprocesses (ptxas) is below ``budget_bytes``, or none is
    running: a whole-row block of 262,144 elements takes LLVM and ptxas gigabytes, and six of
    them at once passed the 8 GiB limit on the H200 (issue 22). ``peak_bytes`` is the most the
    gate saw. 0: no gate. Only ``submit`` and ``shutdown`` (what Triton's ``AsyncCompileMode``
    and the pass use)."""

    def __init__(self, threads: int, budget_bytes: int) -> None:
        import threading
        from concurrent.futures import ThreadPoolExecutor

        self.pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="precompile")
        self.budget = budget_bytes
        self.running = 0
        self.peak_bytes = 0
        self.condition = threading.Condition()
        self.stopped = threading.Event()
        # Sampled beside the compilations too, not only when one waits to start: ptxas grows
        # after its compilation started, and the peak is what a limit would meet.
        self.sampler = threading.Thread(target=self._sample, name="precompile-memory", daemon=True)
        self.sampler.start()

    def _sample(self) -> None:
        while not self.stopped.wait(0.1):
            self.peak_bytes = max(self.peak_bytes, _tree_resident_bytes())

    def _over_budget(self) -> bool:
        resident = _tree_resident_bytes()
        self.peak_bytes = max(self.peak_bytes, resident)
        return resident > self.budget

    def submit(self, fn, *args, **kwargs):
        def gated():
            with self.condition:
                while self.budget and self.running and self._over_budget():
                    self.condition.wait(0.05)
                self.running += 1
            try:
                return fn(*args, **kwargs)
            finally:
                with self.condition:
                    self.running -= 1
                    self.condition.notify_all()

        return self.pool.submit(gated)

    def shutdown(self, wait: bool = True) -> None:
        self.pool.shutdown(wait=wait)
        self.stopped.set()


def narrow_autotuners_for_interpreter(narrowed: dict) -> None:
    """Under the CPU interpreter (TRITON_INTERPRET=1), let ``@triton.autotune`` pick its first
    config instead of timing each one.

    Triton 3.6's Autotuner times configs with the active driver's benchmarker, and the
    interpreter has no driver ("0 active drivers"), so any autotuner with more than one config
    raises on every call. Here its ``do_bench`` returns the same time for every config without
    running it, and ``Autotuner.run`` then takes the first config left after the kernel's own
    ``prune_configs_by`` (ties keep the first), caches it per key as usual and launches the
    kernel once with it. ``narrowed`` collects kernel name -> (number of configs, config used)
    for a note in the result. ``@triton.heuristics`` needs nothing: it computes its values
    without a driver. On a GPU nothing changes."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:  # pragma: no cover - another Triton version
        return

    def untimed_bench(kernel_call, quantiles=None):
        return [0.0, 0.0, 0.0]

    Autotuner.do_bench = property(lambda self: untimed_bench)
    original_run = Autotuner.run

    def run_first_config(self, *args, __original=original_run, **kwargs):
        result = __original(self, *args, **kwargs)
        if len(getattr(self, "configs", ())) > 1:
            name = getattr(getattr(self, "base_fn", None), "__name__", "?")
            narrowed.setdefault(name, (len(self.configs), str(getattr(self, "best_config", "?"))))
        return result

    Autotuner.run = run_first_config


def autotune_notes(narrowed: dict) -> list:
    """Notes for the result about autotuners narrowed under the interpreter."""
    return [
        f"@triton.autotune kernel {name}: {count} configs; the CPU interpreter cannot time them, so every call "
        f"used the first one left after pruning ({config}). On a GPU every config is compiled and timed."
        for name, (count, config) in sorted(narrowed.items())
    ]


def _load_kernel(kernel) -> None:
    """Build a compiled Triton kernel's launcher and load its binary (``CompiledKernel._init_handles``,
    Triton 3.6), as its first launch would. On any error the kernel is put back as it was
    (no launcher, no module), so that its first launch does it all again on the calling thread
    and raises what it raises there."""
    init = getattr(kernel, "_init_handles", None)
    if init is None or getattr(kernel, "module", None) is not None:  # another Triton, or loaded
        return
    try:
        init()
    except Exception:  # noqa: BLE001 - redone, and reported, at the real launch
        kernel._run = None
        kernel.module = None
