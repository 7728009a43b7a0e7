"""GPU benchmark of a submission against the named baseline, the peers and the bandwidth floor.

Nothing ranked is measured where the submission's Python runs. The correctness child records
the submission's Triton launches once per benchmark row (grader/harness/check_child.py); the
trusted replay process (grader/harness/replay_child.py) replays them, times them with events
and CUDA graphs, gives every timed call new inputs and verifies every timed output; a third
process, which never imports a submission, times the peers (cached per GPU and software). This
package plans the rows, builds the replay's benchmark phase, and assembles the ``benchmark``
object from what the processes reported (grader/benchmark/score.py).

Entry points:
    plan_rows(spec, options) -> rows the child records (with their warm-up seeds).
    replay_phase(assignment, rows, recording, options) -> (the replay plan's ``benchmark`` part,
        row id -> why that row cannot be timed).
    finish(assignment, rows=, replay=, unreplayable=, options=, settings=, peers=) -> dict: the
        ``benchmark`` object (headline None with a reason when the kernel earns no score).

Modules: options (BenchmarkOptions, rows), children (the peers child and its cache), verify
(re-verifying the peers' timed outputs), score (statistics, floors, flags, headline), cli
(``grader benchmark``: ``benchmark_file`` grades a file with grader.runner, then its table).
This package never imports grader.runner (the runner imports it). Units: seconds, bytes,
bytes/s, FLOP/s.
"""

from __future__ import annotations

from grader.assignments import Assignment
from grader.benchmark.children import cached_peers
from grader.benchmark.options import BenchmarkOptions, benchmark_rows
from grader.benchmark.score import assemble
from grader.benchmark.verify import timed_verification
from grader.harness.protocol import (
    BenchmarkPlan,
    Recording,
    TimedRow,
    TimingOptions,
)
from grader.sandbox.bwrap import sandbox_label

__all__ = ["BenchmarkOptions", "NoGPU", "finish", "plan_rows", "replay_phase", "timed_verification"]


class NoGPU(RuntimeError):
    """Timing needs a CUDA GPU and torch sees none."""


def require_gpu() -> None:
    """Raises NoGPU when torch sees no CUDA device."""
    import torch

    if not torch.cuda.is_available():
        raise NoGPU("timing needs a CUDA GPU and none is visible here; no timings are reported "
                    "(Triton CPU-interpreter times say nothing about a GPU kernel)")


def plan_rows(assignment: Assignment, options: BenchmarkOptions) -> list[dict]:
    """The benchmark rows (id, shape, dtype, seed) with the seed of each row's warm-up call."""
    rows = benchmark_rows(assignment.benchmark, options)
    for row in rows:
        row["warmup_seed"] = row["seed"] * 1000 + 999
    return rows


def replay_phase(assignment: Assignment, rows: list[dict], recording: Recording | None, options: BenchmarkOptions
                 ) -> tuple[BenchmarkPlan | None, dict[str, str]]:
    """The replay timer's phase 2 for the rows whose call was recorded and can be replayed,
    and, for every other row, why it cannot be timed."""
    calls = {call.call_id: call for call in (recording.calls if recording else [])}
    timed, unreplayable = [], {}
    for row in rows:
        call = calls.get(row["id"])
        if call is None:
            unreplayable[row["id"]] = "the submission's call on this row was not recorded"
        elif call.not_replayable:
            unreplayable[row["id"]] = f"the call's launches cannot be replayed: {call.not_replayable}"
        elif not call.launches:
            unreplayable[row["id"]] = "the call launched no Triton kernel"
        else:
            timed.append(TimedRow(id=row["id"], shape=row["shape"], dtype=row["dtype"], seed=row["seed"],
                                  recording=call, verification=timed_verification(assignment, row["dtype"])))
    if not timed:
        return None, unreplayable
    return BenchmarkPlan(rows=timed, options=TimingOptions(**options.child_options())), unreplayable


def finish(assignment: Assignment, *, rows: list[dict], replay, unreplayable: dict[str, str],
           options: BenchmarkOptions, settings, peers: dict | None = None) -> dict:
    """The ``benchmark`` object from the replay's timings and the (cached) peers.

    Args:
        replay: the ReplayOutcome of the process that timed the rows (grader/children/replay_process.py), or None
            when nothing could be replayed.
        unreplayable: row id -> why it was not timed.
        peers: a peers result to reuse (default: cached per GPU and software, else timed now).
    """
    peers = peers if peers is not None else cached_peers(assignment, options=options, settings=settings, rows=rows)
    student_rows: dict[str, dict] = {row_id: {"error": reason} for row_id, reason in unreplayable.items()}
    global_flags: list[str] = []
    info = None
    if replay is not None:
        info = {"duration_s": replay.duration_s, "log": replay.log}
        for entry in replay.result.rows:
            student_rows[entry.id] = entry.model_dump(exclude_none=True)
        if replay.error:
            global_flags.append(f"the replay timer failed: {replay.error}")
        if replay.result.benchmark_error:
            global_flags.append(replay.result.benchmark_error)
    sandbox = sandbox_label(settings)
    result = assemble(spec=assignment.benchmark, student_rows=student_rows, peers_doc=peers, rows=rows,
                      options=options, global_flags=global_flags, sandbox=sandbox, student_info=info)
    result["peers_cached_from"] = peers.get("cached_from")
    return result


