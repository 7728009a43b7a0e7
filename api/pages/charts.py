"""Benchmark charts, drawn on the server as SVG (no chart library, no script): one chart per
benchmark row (shape and dtype) of the stored benchmark JSON, comparing the time per call of
the student's kernel with the named baseline, aten and the other peers, and the row's
bandwidth floor, each under CUDA-graph timing (the ranked method, docs/benchmarks.md); and one
roofline-style chart of every row's fraction of its floor (``speed_chart``, from
grader.report.speed's RowSpeed: the same numbers the speed table and ``grader check`` show).

Read from ``benchmark.rows[]``: ``id``, ``impls[<name>].graph.median_s``, ``floor_s_min``
(``floor_s_3_access`` in documents of benchmark schema 1), ``scope``, ``flags``,
``speedup_vs_baseline.graph``; the baseline's name from ``benchmark.baseline.name`` (or the
headline's ``baseline``). Anything missing or not a finite positive number is shown as "not
timed", never drawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from grader.report.speed import RowSpeed, format_fraction, format_rate

STUDENT = "student"

#: Geometry of one chart (SVG user units).
WIDTH = 720
LABEL_W = 250
VALUE_W = 110
BAR_H = 20
GAP = 8
TOP = 8
AXIS_H = 30


@dataclass(frozen=True)
class Bar:
    """One horizontal bar: an implementation's (or the floor's) time per call."""

    key: str  # impl name, or "floor"
    label: str
    kind: str  # student | baseline | peer | floor
    seconds: float | None
    y: float
    width: float = 0.0
    note: str = ""  # why it is not drawn

    @property
    def text(self) -> str:
        return format_time(self.seconds) if self.seconds is not None else (self.note or "not timed")


@dataclass(frozen=True)
class Chart:
    """The chart of one benchmark row."""

    row_id: str
    bars: list[Bar]
    ticks: list[tuple[float, str]]
    floor_x: float | None
    height: float
    scope: str | None
    flags: list[str] = field(default_factory=list)
    speedup: float | None = None
    baseline: str | None = None

    @property
    def summary(self) -> str:
        """The chart in words (the SVG's accessible name)."""
        parts = [f"{bar.label}: {bar.text}" for bar in self.bars]
        return f"{self.row_id}, time per call (lower is better): " + "; ".join(parts)


def format_time(seconds: float) -> str:
    """Microseconds (or milliseconds from 10 ms) with 3 significant digits."""
    if seconds >= 0.01:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds * 1e6:.3g} µs"


def _positive(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def _graph_median(impl: Any) -> float | None:
    if not isinstance(impl, dict):
        return None
    graph = impl.get("graph")
    return _positive(graph.get("median_s")) if isinstance(graph, dict) else None


def _label(name: str, baseline: str | None) -> tuple[str, str]:
    if name == STUDENT:
        return "your kernel", "student"
    if name == baseline:
        return f"{name} (baseline)", "baseline"
    return name, "peer"


def _nice_ticks(maximum: float) -> list[float]:
    """0 and up to 4 round steps covering `maximum` (seconds)."""
    exponent = math.floor(math.log10(maximum / 4))
    for step_unit in (1, 2, 2.5, 5, 10):
        step = step_unit * 10 ** exponent
        if maximum / step <= 4:
            break
    return [step * i for i in range(int(maximum / step) + 2) if step * i <= maximum * 1.0001]


def benchmark_charts(benchmark: dict[str, Any] | None) -> list[Chart]:
    """One chart per row of `benchmark` (empty for none, or rows that are not objects)."""
    if not isinstance(benchmark, dict) or not isinstance(benchmark.get("rows"), list):
        return []
    baseline = None
    if isinstance(benchmark.get("baseline"), dict):
        baseline = benchmark["baseline"].get("name")
    if baseline is None and isinstance(benchmark.get("headline"), dict):
        baseline = benchmark["headline"].get("baseline")
    charts = []
    for row in benchmark["rows"]:
        if isinstance(row, dict):
            charts.append(_chart(row, baseline if isinstance(baseline, str) else None))
    return charts


def _chart(row: dict[str, Any], baseline: str | None) -> Chart:
    impls = row.get("impls") if isinstance(row.get("impls"), dict) else {}
    names = [STUDENT] + ([baseline] if baseline in impls and baseline != STUDENT else [])
    names += [name for name in impls if name not in names]
    floor = _positive(row.get("floor_s_min", row.get("floor_s_3_access")))
    entries: list[tuple[str, str, str, float | None, str]] = []
    for name in names:
        label, kind = _label(str(name), baseline)
        impl = impls.get(name)
        seconds = _graph_median(impl)
        note = ""
        if seconds is None:
            error = impl.get("error") if isinstance(impl, dict) else None
            note = f"not timed: {str(error)[:80]}" if error else "not timed"
        entries.append((str(name), label, kind, seconds, note))
    entries.append(("floor", "bandwidth floor", "floor", floor, "not measured"))
    times = [seconds for *_, seconds, _ in entries if seconds is not None]
    maximum = max(times) if times else 1e-6
    ticks = _nice_ticks(maximum)
    scale_max = max(maximum, ticks[-1]) if ticks else maximum
    plot_w = WIDTH - LABEL_W - VALUE_W
    bars = []
    for index, (key, label, kind, seconds, note) in enumerate(entries):
        y = TOP + index * (BAR_H + GAP)
        width = plot_w * seconds / scale_max if seconds is not None else 0.0
        bars.append(Bar(key=key, label=label, kind=kind, seconds=seconds, y=y,
                        width=max(width, 1.0) if seconds is not None else 0.0, note=note))
    height = TOP + len(bars) * (BAR_H + GAP) + AXIS_H
    tick_marks = [(LABEL_W + plot_w * t / scale_max, format_time(t) if t else "0") for t in ticks]
    speedup = row.get("speedup_vs_baseline")
    flags = row.get("flags") if isinstance(row.get("flags"), list) else []
    return Chart(
        row_id=str(row.get("id", "?")), bars=bars, ticks=tick_marks,
        floor_x=LABEL_W + plot_w * floor / scale_max if floor is not None else None,
        height=height, scope=row.get("scope") if isinstance(row.get("scope"), str) else None,
        flags=[str(f) for f in flags],
        speedup=_positive(speedup.get("graph")) if isinstance(speedup, dict) else None,
        baseline=baseline)


#: Geometry of the roofline-style chart (SVG user units). Wide: the row's label left of its
#: bar, the value right of the floor line. Compact (phones): the label and value on a line
#: above a full-width bar, so that the text stays legible when the SVG is 360 px wide.
SPEED_WIDE = {"width": WIDTH, "plot_x": 190, "plot_w": 300, "row_h": BAR_H + GAP, "bar_h": BAR_H}
SPEED_COMPACT = {"width": 360, "plot_x": 12, "plot_w": 300, "row_h": 40, "bar_h": 14}


@dataclass(frozen=True)
class SpeedBar:
    """One row of the roofline-style chart: the student's fraction of the row's floor."""

    row: str
    fraction: float | None
    text: str  # "63% · 2660 GB/s", or why there is no bar
    furthest: bool  # named in the summary as furthest from the floor
    label_x: float
    label_y: float
    bar_y: float
    width: float
    text_x: float
    text_y: float
    text_anchor: str  # start | end (SVG text-anchor)


@dataclass(frozen=True)
class SpeedChart:
    """Every row's fraction of its floor (1 = the floor: the hardware's measured ceiling), in
    one layout (``compact`` for phones)."""

    bars: list[SpeedBar]
    ticks: list[tuple[float, str]]
    floor_x: float
    plot_x: float
    bar_h: float
    width: int
    height: float
    compact: bool

    @property
    def summary(self) -> str:
        """The chart in words (the SVG's accessible name)."""
        parts = [f"{bar.row}: {bar.text}" for bar in self.bars]
        return "Fraction of the floor per row (higher is better, 100% is the floor): " + "; ".join(parts)


def speed_chart(speeds: list[RowSpeed], furthest: list[RowSpeed] | None = None, *,
                compact: bool = False) -> SpeedChart | None:
    """The roofline-style chart of `speeds` (grader.report.speed.row_speeds): per row a bar of the
    student's fraction of the floor against a line at 100%, labelled with the achieved rate;
    rows in `furthest` are marked. None when no row has a fraction."""
    fractions = [s.fraction_of_floor for s in speeds if s.fraction_of_floor is not None]
    if not fractions:
        return None
    geometry = SPEED_COMPACT if compact else SPEED_WIDE
    plot_x, plot_w, row_h, bar_h = geometry["plot_x"], geometry["plot_w"], geometry["row_h"], geometry["bar_h"]
    named = {s.row for s in furthest or []}
    # The axis covers the floor and any row past it (a time under the floor is flagged,
    # grader/benchmark/score.py, but still drawn as measured), in steps of 25%.
    scale_max = max(1.0, math.ceil(max(fractions) * 4) / 4)
    floor_x = plot_x + plot_w / scale_max
    top = TOP + BAR_H  # room for the floor's label
    bars = []
    for index, speed in enumerate(speeds):
        fraction = speed.fraction_of_floor
        if fraction is None:
            text = speed.missing or "not timed"
            if speed.student_s is not None:
                text = f"{format_rate(speed)}; {text}"
            width = 0.0
        else:
            # Compact: one rate, the FLOP rate where the floor counts FLOPs (the table has both).
            rate = (f"{speed.tflop_per_s:.3g} TFLOP/s" if compact and speed.tflop_per_s is not None
                    else format_rate(speed, none=""))
            text = format_fraction(fraction) + (f" · {rate}" if rate else "")
            width = max(plot_w * fraction / scale_max, 1.0)
        if not speed.ranked:
            text += " (not ranked)"
        y = top + index * row_h
        if compact:  # label and value on a line, the bar under it
            label = (plot_x, y + 13)
            bar_y = y + 18
            value, anchor = (geometry["width"] - 4, y + 13), "end"
        else:  # label left of the bar; the value right of the bar and of the floor line
            label = (plot_x - 8, y + 15)
            bar_y = y
            value, anchor = (max(plot_x + width, floor_x) + 6, y + 15), "start"
        bars.append(SpeedBar(row=speed.row, fraction=fraction, text=text, furthest=speed.row in named,
                             label_x=label[0], label_y=label[1], bar_y=bar_y, width=width,
                             text_x=value[0], text_y=value[1], text_anchor=anchor))
    height = top + len(bars) * row_h + AXIS_H
    steps = int(round(scale_max / 0.25))
    ticks = [(plot_x + plot_w * (i * 0.25) / scale_max, f"{i * 25}%") for i in range(steps + 1)]
    return SpeedChart(bars=bars, ticks=ticks, floor_x=floor_x, plot_x=plot_x, bar_h=bar_h,
                      width=geometry["width"], height=height, compact=compact)
