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
    benchmark_file(path, output=, assignment=, settings=, options=, peers=) -> dict: the whole
        grading of a file (checks, then the benchmark) and its ``benchmark`` object.

Modules: options (BenchmarkOptions, rows), children (the peers child and its cache), verify
(re-verifying the peers' timed outputs), score (statistics, floors, flags, headline), cli
(``grader benchmark`` and its table). Units: seconds, bytes, bytes/s.
"""

from __future__ import annotations

import json
from pathlib import Path

from grader.assignments import Assignment, get_assignment
from grader.benchmark.children import cached_peers
from grader.benchmark.options import BenchmarkOptions, benchmark_rows
from grader.benchmark.score import assemble
from grader.bwrap import sandbox_label
from grader.harness.protocol import Recording

__all__ = ["BenchmarkOptions", "NoGPU", "benchmark_file", "finish", "plan_rows", "replay_phase"]

#: Output rows the replay verifies after every timed call (drawn at random after the call).
VERIFY_ROWS_PER_CALL = 2


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
                 ) -> tuple[dict | None, dict[str, str]]:
    """The replay plan's ``benchmark`` part for the rows whose call was recorded and can be
    replayed, and, for every other row, why it cannot be timed."""
    import torch

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
            timed.append({**{k: row[k] for k in ("id", "shape", "dtype", "seed")}, "recording": call.model_dump()})
    if not timed:
        return None, unreplayable
    tolerances = {}
    for name in {row["dtype"] for row in rows}:
        tolerance = assignment.tolerance(getattr(torch, name))
        tolerances[name] = {"rtol": tolerance.rtol, "atol": tolerance.atol, "vtol": tolerance.vtol}
    return ({"rows": timed, "options": options.child_options(), "tolerances": tolerances,
             "verify_rows_per_call": VERIFY_ROWS_PER_CALL}, unreplayable)


def finish(assignment: Assignment, *, rows: list[dict], replay, unreplayable: dict[str, str],
           options: BenchmarkOptions, settings, peers: dict | None = None) -> dict:
    """The ``benchmark`` object from the replay's timings and the (cached) peers.

    Args:
        replay: the ReplayOutcome of the process that timed the rows (grader/replay.py), or None
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
        for entry in replay.result.get("rows", []):
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                student_rows[entry["id"]] = entry
        if replay.error:
            global_flags.append(f"the replay timer failed: {replay.error}")
        if replay.result.get("benchmark_error"):
            global_flags.append(str(replay.result["benchmark_error"]))
    sandbox = sandbox_label(settings)
    result = assemble(spec=assignment.benchmark, student_rows=student_rows, peers_doc=peers, rows=rows,
                      options=options, global_flags=global_flags, sandbox=sandbox, student_info=info)
    result["peers_cached_from"] = peers.get("cached_from")
    return result


def benchmark_file(path: Path, *, output: Path | None, assignment: str, settings=None,
                   options: BenchmarkOptions | None = None, peers: dict | None = None) -> dict:
    """Grade the file at ``path`` on the GPU (the checks, then the benchmark) and return its
    ``benchmark`` object (with ``verdict`` and the failed checks when it did not pass); writes
    the JSON to ``output`` when given.

    Raises:
        NoGPU: no CUDA device.
    """
    from grader.runner import grade_source

    require_gpu()
    spec = get_assignment(assignment)
    document = grade_source(Path(path).read_bytes(), assignment=spec.manifest.name, device="cuda", settings=settings,
                            benchmark="on", benchmark_options=options, peers=peers)
    result = document.benchmark.model_dump() if document.benchmark is not None else {
        "headline": {"value": None, "reason": "no benchmark ran"}, "rows": []}
    result["verdict"] = document.verdict.value
    if document.verdict.value != "passed":
        failed = [c.name for c in document.checks if not c.passed and not c.skipped]
        reason = document.error.message if document.error else f"failed checks: {', '.join(failed)}"
        result["headline"] = {"value": None, "reason": f"not benchmarked: the file did not pass ({reason})"}
    result["source"] = str(path)
    if output is not None:
        Path(output).write_text(json.dumps(result, indent=2, default=str) + "\n")
    return result
