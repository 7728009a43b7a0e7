"""The ``benchmark`` object of a result document: its rows and its headline, and the base of
every model of the document.

Apart from grader/report/document.py so that the speed figures (grader/report/speed.py), which
read these rows, and the document, which shows those figures in its summary, import in one
direction: document -> speed -> benchmark_result.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class DocumentModel(BaseModel):
    """Base of every result-document model: unknown keys refused, non-finite floats as strings."""

    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="strings", populate_by_name=True)


class Headline(DocumentModel):
    """The ranked number of a benchmark, or why there is none.

    Attributes:
        name: what the value is (e.g. ``geomean_speedup_vs_baseline_graph``).
        value: the number (higher is better), or None when the kernel earns no score.
        baseline: the named comparison the ratio is taken against.
        method: the timing method the value comes from (``graph``).
        rows: how many benchmark rows the value summarises.
        reason: why there is no value (None when there is one).
    """

    name: str
    value: float | None = None
    baseline: str | None = None
    method: str | None = None
    rows: int = 0
    reason: str | None = None


class BenchmarkRow(BaseModel):
    """One row of the ``benchmark`` object (grader/benchmark/score.py ``assemble`` writes it).

    Attributes:
        id: ``<shape>/<dtype>`` (``4096x4096/float16``).
        shape / dtype: the row's inputs as bench.py's ``make_inputs`` reads them.
        floor: the row's floor by kind (score.row_floor: ``kind``, ``s_min``, ``s_two_pass``,
            ``bytes_min``, ``flops``, the measured bandwidth and peak it used, ``what``).
        bytes_min / bytes_two_pass / floor_s_min / floor_s_two_pass: the same, flat (seconds).
        impls: implementation -> its statistics, verification and fractions of the floor.
        ratio_student_over_baseline / speedup_vs_baseline: per timing method (event, graph).
        flags: why the row is not ranked (empty: ranked); ranked: whether it counts.
        scope: what was timed, in words.
        peers_process: the peers child's resources after this row (open descriptors, threads,
            peak resident set, free work space: bench_child.process_state), empty when the
            peers came from the cache of an earlier version.

    Extra keys are kept (documents stored by earlier versions carry others).
    """

    model_config = ConfigDict(extra="allow", ser_json_inf_nan="strings")

    id: str = ""
    shape: list[int] = Field(default_factory=list)
    dtype: str = ""
    floor: dict[str, Any] | None = None
    bytes_min: int | None = None
    bytes_two_pass: int | None = None
    floor_s_min: float | None = None
    floor_s_two_pass: float | None = None
    impls: dict[str, dict[str, Any]] = Field(default_factory=dict)
    ratio_student_over_baseline: dict[str, float | None] = Field(default_factory=dict)
    speedup_vs_baseline: dict[str, float | None] = Field(default_factory=dict)
    student_bandwidth_fraction_min: dict[str, float | None] = Field(default_factory=dict)
    peers_process: dict[str, int] = Field(default_factory=dict)
    streaming_probe: dict[str, Any] | None = None
    flags: list[str] = Field(default_factory=list)
    ranked: bool = False
    scope: str = ""


class BenchmarkResult(BaseModel):
    """The ``benchmark`` object of a result document (grader/benchmark).

    Only the headline and the error are read by other processes (the leaderboard ranks
    ``headline.value``); the rows are typed (``BenchmarkRow``); further keys (environment,
    measured peaks, options) are stored and shown as they are.
    """

    model_config = ConfigDict(extra="allow", ser_json_inf_nan="strings")

    headline: Headline | None = None
    error: str | None = None
    rows: list[BenchmarkRow] = Field(default_factory=list)
