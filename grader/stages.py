"""The stages of one grading, as the student sees them while it runs (``grader submit``, the
live submission page), and the one message that carries the current stage from the grader
process to the worker.

A grading moves forward through ``preparing`` (the plan and its inputs), ``compiling`` (the
check child's compile-only pass, GPU only), ``checks`` (the correctness calls) and
``benchmark`` (the trusted replay's timing against the peers and the floor, GPU only, when
every check passed); a stage is never reported twice or after a later one. The grader parent
reports what it sees itself (the plan built, the timing started) and what the main check
child's progress lines show (``precompile``, the first ``call``); nothing the child writes
decides a verdict here, it only moves this label forward.

``grader check`` with ``GRADER_STAGE_FILE=PATH`` in its environment writes each new stage to
PATH as a ``StageReport`` (JSON, replaced atomically); the worker polls that file and stores
the stage on the grading's row.
Imports only the standard library and pydantic: the service reads it without torch.
"""

from __future__ import annotations

import datetime as dt
import enum
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, ConfigDict


class GradingStage(enum.StrEnum):
    """Where a running grading is, in the order a grading goes through them."""

    PREPARING = "preparing"
    COMPILING = "compiling"
    CHECKS = "checks"
    BENCHMARK = "benchmark"

    @property
    def label(self) -> str:
        """What the student reads: one short phrase."""
        return _LABELS[self]


_LABELS = {
    GradingStage.PREPARING: "preparing the inputs",
    GradingStage.COMPILING: "compiling your kernels",
    GradingStage.CHECKS: "running the correctness checks",
    GradingStage.BENCHMARK: "timing your kernel against the peers",
}
_ORDER = list(GradingStage)
#: The environment variable that names the stage file to ``grader check`` (set by the worker).
STAGE_FILE_VARIABLE = "GRADER_STAGE_FILE"
#: The stage file's name in the worker's grading folder.
STAGE_FILE_NAME = "stage.json"


class StageReport(BaseModel):
    """The current stage of a grading (the file ``grader check --stage-file`` writes).

    Attributes:
        stage: the stage entered.
        at: when the grader entered it (UTC).
    """

    model_config = ConfigDict(extra="forbid")

    stage: GradingStage
    at: dt.datetime


_lock = threading.Lock()
_listener: Callable[[GradingStage], None] | None = None
_reached: int = -1


@contextmanager
def stage_listener(listener: Callable[[GradingStage], None] | None) -> Iterator[None]:
    """Send the stages of the grading run inside this block to ``listener`` (called at most once
    per stage, in order, from whichever grader thread sees it; it must be quick and must not
    raise). ``None``: stages are not reported. One grading a process: nesting replaces."""
    global _listener, _reached
    with _lock:
        previous, previous_reached = _listener, _reached
        _listener, _reached = listener, -1
    try:
        yield
    finally:
        with _lock:
            _listener, _reached = previous, previous_reached


def report_stage(stage: GradingStage) -> None:
    """The grading entered ``stage``; ignored when no listener is set, or when this stage or a
    later one was already reported."""
    global _reached
    with _lock:
        listener, index = _listener, _ORDER.index(stage)
        if listener is None or index <= _reached:
            return
        _reached = index
    try:
        listener(stage)
    except Exception:  # noqa: BLE001 - a label must never break a grading
        pass


def stage_file_writer(path: Path) -> Callable[[GradingStage], None]:
    """A listener that writes each stage to ``path`` as a ``StageReport`` (a temporary file
    renamed over it, so that a reader never sees half a report)."""

    def write(stage: GradingStage) -> None:
        report = StageReport(stage=stage, at=dt.datetime.now(dt.UTC))
        temporary = path.with_name(f".{path.name}.{os.getpid()}")
        temporary.write_text(report.model_dump_json(), encoding="utf-8")
        os.replace(temporary, path)

    return write


def read_stage_file(path: Path) -> StageReport | None:
    """The report at ``path``, or None when there is none yet or it cannot be read."""
    try:
        return StageReport.model_validate_json(path.read_bytes()[:4096])
    except (OSError, ValueError):
        return None
