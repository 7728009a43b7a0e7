"""The progress pipe's vocabulary, as the parent reads it: one line per event a child writes
(grader/harness/check_child.py ``Progress``): ``import``, ``plan``, ``precompile``, ``call <id>``,
``compile begin``/``compile end`` around each Triton compilation, ``compiling``/``compiled``
marks that say what compiled and at what cost (``protocol.CompileMark``), ``done``.

``ProgressLines`` reads the pipe on its own thread and keeps what the limits and the report
need: the last phase, the open compilations, the time spent compiling, the first call's
start. Everything on the pipe is hostile: a diagnostic and a clock, never evidence.
"""

from __future__ import annotations

import os
import threading
import time

from grader.harness.protocol import CompileMark
from grader.stages import GradingStage, report_stage

#: Most compilations one child's report keeps (the rest are counted).
MAX_COMPILE_RECORDS = 256
#: Progress lines with which the harness brackets a Triton compilation (check_child.py).
COMPILE_BEGIN = "compile begin"
#: The line of a check child started ahead of its job when its plan arrived (check_child.py).
PLAN_RECEIVED = "plan"
COMPILE_END = "compile end"


def phase_mark(line: str) -> str | None:
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
        #: lines (harness/compilation.py report_each_compilation; protocol.CompileMark), timed by this
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
                    mark = phase_mark(line)
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
