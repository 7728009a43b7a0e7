"""From timings to the ``benchmark`` object: floors, ratios, flags and the headline.

Pure functions of the timing documents the children wrote (after the parent re-verified the
outputs, grader/benchmark/verify.py); unit-tested on CPU.

Headline: the geometric mean over rows of baseline_time / student_time under CUDA-graph timing;
a row is ranked only when nothing flags it (wrong or stale timed outputs, a time under the
bandwidth floor, event time undercutting the device-synchronised wall clock, persisting-L2
changes, replaced timing functions), and the headline exists only when every row is ranked.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import asdict

from grader.assignments.protocol import BenchmarkSpec
from grader.benchmark.options import BenchmarkOptions
from grader.version import grader_version

SCHEMA_VERSION = 2
STUDENT = "student"
HEADLINE_NAME = "geomean_speedup_vs_baseline_graph"
# A time under IMPLAUSIBLE_FRACTION x the one-pass floor (i.e. above 1/0.8 = 125% of the copy
# bandwidth measured in the same run) is not physical for a streaming kernel: reads can run
# somewhat faster than a copy's mix of reads and writes, but not by a quarter. Such a row is
# flagged and not ranked.
IMPLAUSIBLE_FRACTION = 0.8
# Event/wall cross-check: the event median must not undercut the device-synchronised lower bound
# of the GPU work of the call on all streams by more than this factor and slack (jitter).
WALL_FACTOR = 0.8
WALL_SLACK_S = 5e-6

METHOD_SCOPE = (
    "Timed: the call on contiguous inputs rotated among {sets} buffer sets, after an L2 flush "
    "(sum over a {flush_mib} MiB buffer) and a persisting-L2 reset. event = CUDA events on the calling "
    "stream around each call (host runs ahead, so launch overhead shows only where it exceeds the GPU "
    "time of the preceding flush); graph = {sets} calls with flushes captured in one CUDA graph, minus a "
    "flush-only graph, per call (no launch overhead; write-back of the call's dirty L2 lines during the "
    "next flush included). Not timed: input generation, the first call (compilation), warm-up, the "
    "flush itself, host-device synchronisation. Floor: {floor_bytes} bytes (one pass) / copy bandwidth."
)


def geometric_mean(values: list[float]) -> float | None:
    """Geometric mean of positive numbers; None for an empty list or any non-positive value."""
    if not values or any(not (v > 0 and math.isfinite(v)) for v in values):
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def is_implausible(time_s: float | None, floor_s: float) -> bool:
    """True when a time (s) beats the bandwidth floor (s) by more than IMPLAUSIBLE_FRACTION allows."""
    return time_s is not None and time_s < IMPLAUSIBLE_FRACTION * floor_s


def event_undercuts_wall(event_median_s: float, gpu_lower_bound_s: float) -> bool:
    """True when event timing saw far less work than the device-synchronised wall clock did."""
    return event_median_s < WALL_FACTOR * gpu_lower_bound_s - WALL_SLACK_S


def median_of(stats: dict | None) -> float | None:
    """``stats["median_s"]`` when it is a finite number, else None."""
    if not stats or "median_s" not in stats:
        return None
    value = stats["median_s"]
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None


def finite_json(value):
    """``value`` with every NaN or infinity replaced by None (strict JSON for the result store)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def _impl_summary(result: dict | None, floor_min: float, floor_two_pass: float) -> dict:
    if not result:
        return {"error": "not timed"}
    out = {k: result[k] for k in ("event", "graph", "wall", "first_call_s", "verified", "error") if k in result}
    for method in ("event", "graph"):
        t = median_of(result.get(method))
        if t:
            out.setdefault("bandwidth_fraction_min", {})[method] = floor_min / t
            out.setdefault("bandwidth_fraction_two_pass", {})[method] = floor_two_pass / t
    return out


def student_flags(result: dict | None, floor_min: float, entry: dict) -> list[str]:
    """Why a row of the student's timings must not be ranked (empty: rank it)."""
    flags: list[str] = []
    if not result:
        return ["not timed"]
    if result.get("error"):
        flags.append(f"error: {result['error'][:300]}")
    for method in ("event", "graph"):
        stats = result.get(method)
        if not isinstance(stats, dict) or "median_s" not in stats:
            if isinstance(stats, dict) and stats.get("error"):
                flags.append(f"{method} timing failed: {stats['error'][:300]}")
            elif not result.get("error"):
                flags.append(f"{method} timing missing")
            continue
        check = (result.get("verified") or {}).get(method)
        if not check or not check.get("passed"):
            detail = "; ".join((check or {}).get("problems", [])[:2]) or "not verified"
            flags.append(f"wrong or stale output in {method}-timed calls: {detail}")
        if is_implausible(median_of(stats), floor_min):
            flags.append(f"implausible {method} time: {median_of(stats) * 1e6:.2f} us is under "
                         f"{IMPLAUSIBLE_FRACTION:g} x the bandwidth floor {floor_min * 1e6:.2f} us")
    wall = result.get("wall")
    event_t = median_of(result.get("event"))
    if wall and event_t is not None and event_undercuts_wall(event_t, wall["gpu_lower_bound_median_s"]):
        flags.append(f"event time {event_t * 1e6:.1f} us undercuts the device-synchronised wall clock "
                     f"({wall['gpu_lower_bound_median_s'] * 1e6:.1f} us of GPU work after the call returned): "
                     "work on another stream?")
    for key in ("persisting_l2_limit_after", "persisting_l2_limit_after_graph"):
        if result.get(key):
            flags.append(f"the persisting-L2 limit was set to {result[key]} bytes during timing")
    if entry.get("tampered"):
        flags.append("timing or synchronisation functions were replaced: " + ", ".join(entry["tampered"]))
    return flags


def claimed_gpu_seconds(student_doc: dict, options: BenchmarkOptions) -> float:
    """GPU time (s) the student's timing process says it spent in timed phases (a sanity bound)."""
    total = 0.0
    for entry in student_doc.get("rows", []):
        result = (entry.get("impls") or {}).get(STUDENT) or {}
        for method in ("event", "graph"):
            stats = result.get(method) or {}
            if isinstance(stats.get("n"), int) and isinstance(stats.get("mean_s"), (int, float)):
                per = stats["mean_s"] * (options.sets if method == "graph" else 1)
                total += stats["n"] * max(per, 0.0)
    return total


def assemble(*, spec: BenchmarkSpec, student_doc: dict, student_info: dict | None, peers_doc: dict,
             rows: list[dict], options: BenchmarkOptions, sandbox: str | None = None) -> dict:
    """The ``benchmark`` object: per-row times, ratios, bandwidth fractions, flags, headline.

    Args:
        spec: the assignment's benchmark (baseline, peers, scopes, floors).
        student_doc / peers_doc: what the timing children wrote, outputs already verified.
        student_info: the student child's duration and log.
        rows: the rows timed (benchmark_rows).
        options: the run's options.
        sandbox: how the student child was sandboxed, in words.
    """
    bandwidth = (peers_doc.get("copy_bandwidth") or {}).get("bytes_per_s")
    peer_rows = {e.get("id"): e for e in peers_doc.get("rows", [])}
    student_rows = {e.get("id"): e for e in student_doc.get("rows", [])}
    flush_bytes = peers_doc.get("flush_bytes") or student_doc.get("flush_bytes") or options.flush_bytes
    out_rows = []
    global_flags: list[str] = []
    if student_doc.get("error"):
        global_flags.append(f"submission: {student_doc['error']}")
    if not bandwidth:
        global_flags.append("no copy bandwidth was measured, so no floor could be checked")
    for tampered in student_doc.get("tampered_after_import") or []:
        global_flags.append(f"importing the submission replaced {tampered}")
    speedups_graph, speedups_event, fractions = [], [], []
    for row in rows:
        shape, dtype = tuple(row["shape"]), row["dtype"]
        floor_bytes = spec.floor_bytes(shape, dtype)
        floor_min = floor_bytes["min"] / bandwidth if bandwidth else float("nan")
        floor_two_pass = floor_bytes["two_pass"] / bandwidth if bandwidth else float("nan")
        s_entry = student_rows.get(row["id"], {})
        p_entry = peer_rows.get(row["id"], {})
        impls = {STUDENT: _impl_summary((s_entry.get("impls") or {}).get(STUDENT), floor_min, floor_two_pass)}
        for peer in spec.peers:
            result = (p_entry.get("impls") or {}).get(peer)
            if result is not None:
                impls[peer] = _impl_summary(result, floor_min, floor_two_pass)
                bad = result.get("verified") or {}
                if result.get("error") or any(not v.get("passed") for v in bad.values()):
                    impls[peer]["flags"] = ["peer failed or wrong: " + str(result.get("error") or bad)[:300]]
        flags = student_flags((s_entry.get("impls") or {}).get(STUDENT), floor_min, s_entry) if bandwidth else ["no floor"]
        if s_entry.get("error"):
            flags.append(s_entry["error"])
        ratio, speedup = {}, {}
        for method in ("event", "graph"):
            s = median_of(impls[STUDENT].get(method))
            b = median_of(impls.get(spec.baseline, {}).get(method))
            if s and b:
                ratio[method] = s / b
                speedup[method] = b / s
        s_graph = median_of(impls[STUDENT].get("graph"))
        probe = p_entry.get("streaming_probe") or {}
        probe_graph = median_of(probe.get("graph"))
        if probe_graph and probe_graph > 0:
            streaming_probe = {"what": probe.get("what"), "graph_s": probe_graph,
                               "bandwidth_fraction_min": floor_min / probe_graph if bandwidth else None,
                               "student_time_over_probe": s_graph / probe_graph if s_graph else None}
        else:
            streaming_probe = {"error": probe.get("error") or "not measured"}
        ranked = not flags and "graph" in speedup
        if ranked:
            speedups_graph.append(speedup["graph"])
            if "event" in speedup:
                speedups_event.append(speedup["event"])
            fractions.append(floor_min / s_graph)
        out_rows.append({
            "id": row["id"],
            "shape": list(shape),
            "dtype": dtype,
            "bytes_min": floor_bytes["min"],
            "bytes_two_pass": floor_bytes["two_pass"],
            "floor_s_min": floor_min,
            "floor_s_two_pass": floor_two_pass,
            "impls": impls,
            "ratio_student_over_baseline": ratio,
            "speedup_vs_baseline": speedup,
            "student_bandwidth_fraction_min": impls[STUDENT].get("bandwidth_fraction_min", {}),
            "streaming_probe": streaming_probe,
            "flags": flags,
            "ranked": ranked,
            "scope": f"{row['id']}. " + METHOD_SCOPE.format(sets=options.sets, flush_mib=int(flush_bytes or 0) >> 20,
                                                            floor_bytes=floor_bytes["min"]),
        })
    all_ranked = bool(out_rows) and all(r["ranked"] for r in out_rows) and not global_flags
    value = geometric_mean(speedups_graph) if all_ranked else None
    reason = None
    if not all_ranked:
        bad = [f"{r['id']}: {r['flags'][0]}" for r in out_rows if not r["ranked"] and r["flags"]]
        reason = "; ".join(global_flags + bad[:3]) or "some rows were not timed"
    claimed = claimed_gpu_seconds(student_doc, options)
    if student_info and claimed > student_info.get("duration_s", float("inf")) * 1.05 + 1.0:
        value, reason = None, (f"the timing process claims {claimed:.1f} s of GPU work in "
                               f"{student_info['duration_s']:.1f} s of wall time")
    return finite_json({
        "schema": SCHEMA_VERSION,
        "headline": {"name": HEADLINE_NAME, "value": value, "baseline": spec.baseline, "method": "graph",
                     "rows": len(out_rows), "reason": reason},
        "summary": {
            "geomean_speedup_vs_baseline_graph": geometric_mean(speedups_graph) if all_ranked else None,
            "geomean_speedup_vs_baseline_event": geometric_mean(speedups_event) if all_ranked else None,
            "geomean_bandwidth_fraction_min_graph": geometric_mean(fractions) if all_ranked else None,
        },
        "baseline": {"name": spec.baseline, "scope": spec.scopes.get(spec.baseline)},
        "scopes": spec.scopes,
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "gpu": peers_doc.get("gpu") or student_doc.get("gpu"),
        "gpu_after": peers_doc.get("gpu_after"),
        "versions": {**(peers_doc.get("versions") or {}), "grader": grader_version()},
        "copy_bandwidth": peers_doc.get("copy_bandwidth"),
        "persisting_l2_control": peers_doc.get("persisting_l2_control"),
        "flush_bytes": flush_bytes,
        "options": asdict(options),
        "sandbox": sandbox,
        "flags": global_flags,
        "rows": out_rows,
        "timings_s": {"peers_child": peers_doc.get("duration_s"),
                      "student_child": (student_info or {}).get("duration_s")},
        "log": (student_info or {}).get("log"),
    })
