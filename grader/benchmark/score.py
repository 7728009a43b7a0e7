"""From timings to the ``benchmark`` object: statistics, floors, ratios, flags and the headline.

Pure functions of what the two timing processes reported, unit-tested on CPU: the student's
rows come from the trusted replay timer (grader/harness/replay_child.py: the submission's
recorded Triton launches, every timed output verified there), the peers' from the peers child
(re-verified here, grader/benchmark/verify.py). Every statistic is computed here from the raw
samples the processes reported.

Headline: the geometric mean over rows of baseline_time / student_time under CUDA-graph timing;
a row is ranked only when nothing flags it (a timed output outside tolerance, a time under the
bandwidth floor, event time undercutting the device-synchronised wall clock, a recording that
could not be replayed), and the headline exists only when every row is ranked.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import asdict

from grader.assignments.protocol import BenchmarkSpec, Floor
from grader.benchmark.options import BenchmarkOptions
from grader.harness.timing import summarize
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
    "next flush included). Not timed: input generation and refreshing, verification, the first call "
    "(compilation), warm-up, the flush itself, host-device synchronisation. Floor: {floor}."
)
STUDENT_SCOPE = (
    "the submission's recorded Triton launches for one call, replayed by a process that never runs the "
    "submission's Python (its kernels as compiled, with their grids and arguments, and the buffers its wrapper "
    "filled before launching); not its Python wrapper (validation, allocation) nor PyTorch work it did outside "
    "Triton. Every timed call gets new inputs and is verified on rows drawn after the call"
)


def row_floor(floor: Floor, shape: tuple[int, ...], dtype: str, bandwidth: float | None,
              peaks: dict) -> dict:
    """The floor of one row by its kind, in seconds, with what it is made of.

    bandwidth: bytes / copy bandwidth (bytes/s); compute: FLOPs / the measured matrix-multiply
    peak of the row's dtype (FLOP/s, ``peaks[dtype]["flops_per_s"]``); roofline: the larger of
    both. ``s_min`` is the one-pass floor (ranking flags compare against it), ``s_two_pass``
    the floor of a kernel that reads its inputs twice (the compute part is the same). A
    measurement the kind needs but that is missing gives NaN and ``missing`` says which.

    Returns:
        {"kind", "s_min", "s_two_pass", "bytes_min", "bytes_two_pass", "flops",
         "bandwidth_bytes_per_s", "peak_flops_per_s", "missing": [..], "what": words}.
    """
    nan = float("nan")
    out: dict = {"kind": floor.kind, "bytes_min": None, "bytes_two_pass": None, "flops": None,
                 "bandwidth_bytes_per_s": bandwidth, "peak_flops_per_s": None, "missing": []}
    memory_min = memory_two_pass = compute = None
    if floor.bytes is not None:
        moved = floor.bytes(shape, dtype)
        out["bytes_min"], out["bytes_two_pass"] = moved["min"], moved["two_pass"]
        if floor.kind in ("bandwidth", "roofline"):
            if bandwidth:
                memory_min, memory_two_pass = moved["min"] / bandwidth, moved["two_pass"] / bandwidth
            else:
                out["missing"].append("copy bandwidth")
    if floor.flops is not None:
        out["flops"] = floor.flops(shape, dtype)
        peak = ((peaks or {}).get(dtype) or {}).get("flops_per_s")
        out["peak_flops_per_s"] = peak
        if floor.kind in ("compute", "roofline"):
            if peak:
                compute = out["flops"] / peak
            else:
                out["missing"].append(f"{dtype} matrix-multiply peak")
    if out["missing"]:
        out["s_min"] = out["s_two_pass"] = nan
    elif floor.kind == "bandwidth":
        out["s_min"], out["s_two_pass"] = memory_min, memory_two_pass
    elif floor.kind == "compute":
        out["s_min"] = out["s_two_pass"] = compute
    else:
        out["s_min"], out["s_two_pass"] = max(memory_min, compute), max(memory_two_pass, compute)
    parts = {"bandwidth": f"{out['bytes_min']} bytes (one pass) / copy bandwidth",
             "compute": f"{out['flops']} FLOPs / the measured {dtype} matrix-multiply peak"}
    out["what"] = (parts[floor.kind] if floor.kind != "roofline"
                   else f"the larger of {parts['bandwidth']} and {parts['compute']}")
    return out


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


def restat(stats: dict | None) -> dict | None:
    """Statistics computed here from a process's raw samples (``samples_s``), which are then
    dropped from the stored document; a stats dict without samples (or an error) is returned as
    it is."""
    if not isinstance(stats, dict) or not isinstance(stats.get("samples_s"), list):
        return stats
    samples = [float(v) for v in stats["samples_s"] if isinstance(v, (int, float)) and math.isfinite(v)]
    if not samples:
        return {"error": "no samples"}
    out = summarize(samples, str(stats.get("stop", "?")))
    if isinstance(stats.get("flush_per_call_median_s"), (int, float)):
        out["flush_per_call_median_s"] = stats["flush_per_call_median_s"]
    return out


def _impl_summary(result: dict | None, floor_min: float, floor_two_pass: float) -> dict:
    if not result:
        return {"error": "not timed"}
    keys = ("event", "graph", "wall", "first_call_s", "verified", "event_verified", "graph_verified", "error",
            "launches", "torch_ops", "persisting_l2_limit_after", "stage_s")
    out = {k: result[k] for k in keys if k in result}
    for method in ("event", "graph"):
        if method in out:
            out[method] = restat(out[method])
        t = median_of(out.get(method))
        if t:
            out.setdefault("bandwidth_fraction_min", {})[method] = floor_min / t
            out.setdefault("bandwidth_fraction_two_pass", {})[method] = floor_two_pass / t
    return out


def student_flags(result: dict | None, floor_min: float) -> list[str]:
    """Why a row of the student's (replayed) timings must not be ranked (empty: rank it)."""
    flags: list[str] = []
    if not result:
        return ["not timed"]
    if result.get("error"):
        flags.append(f"error: {str(result['error'])[:300]}")
    for method in ("event", "graph"):
        stats = result.get(method)
        if not isinstance(stats, dict) or "median_s" not in stats:
            if isinstance(stats, dict) and stats.get("error"):
                flags.append(f"{method} timing failed: {str(stats['error'])[:300]}")
            elif not result.get("error"):
                flags.append(f"{method} timing missing")
            continue
        verified = result.get(f"{method}_verified")
        if not isinstance(verified, dict) or not verified.get("passed"):
            detail = ("not verified" if not isinstance(verified, dict) else
                      f"{verified.get('elements_outside_tolerance')} elements outside tolerance in "
                      f"{verified.get('calls_verified')} verified calls (worst "
                      f"{verified.get('worst_error_over_tolerance')} x tolerance)")
            if isinstance(verified, dict) and verified.get("input_elements_changed"):
                detail += (f"; the timed calls changed {verified['input_elements_changed']} elements of their "
                           "inputs in the verified rows")
            flags.append(f"wrong output in {method}-timed calls: {detail}")
        if is_implausible(median_of(stats), floor_min):
            flags.append(f"implausible {method} time: {median_of(stats) * 1e6:.2f} us is under "
                         f"{IMPLAUSIBLE_FRACTION:g} x the floor {floor_min * 1e6:.2f} us")
    wall = result.get("wall")
    event_t = median_of(result.get("event"))
    if wall and event_t is not None and event_undercuts_wall(event_t, wall["gpu_lower_bound_median_s"]):
        flags.append(f"event time {event_t * 1e6:.1f} us undercuts the device-synchronised wall clock "
                     f"({wall['gpu_lower_bound_median_s'] * 1e6:.1f} us of GPU work after the call returned)")
    if result.get("persisting_l2_limit_after"):
        flags.append(f"the persisting-L2 limit was {result['persisting_l2_limit_after']} bytes during timing")
    return flags


def _ending_note(ending: dict, total_rows: int) -> str:
    """A peers child that ended early (a ``PeersEnding``), in words: not a flag (a second child
    timed the rows it did not reach), but said beside the benchmark."""
    tail = str(ending.get("log_tail") or "")[-400:].strip()
    return (f"a peers child ended with status {ending.get('returncode')} after finishing {ending.get('rows_done')} "
            f"of {total_rows} rows; a second one timed the rest" + (f": {tail}" if tail else ""))


def assemble(*, spec: BenchmarkSpec, student_rows: dict[str, dict], peers_doc: dict, rows: list[dict],
             options: BenchmarkOptions, global_flags: list[str] | None = None, sandbox: str | None = None,
             student_info: dict | None = None) -> dict:
    """The ``benchmark`` object: per-row times, ratios, bandwidth fractions, flags, headline.

    Args:
        spec: the assignment's benchmark (baseline, peers, scopes, floors).
        student_rows: row id -> the replay timer's row (raw samples, verification), or
            {"error": ...} for a row that could not be recorded or replayed.
        peers_doc: what the peers child wrote, outputs already re-verified.
        rows: the rows timed (benchmark_rows).
        options: the run's options.
        global_flags: reasons that deny the whole score (e.g. the replay process failed).
        sandbox: how the timing processes were sandboxed, in words.
        student_info: the replay process's duration and log.
    """
    bandwidth = (peers_doc.get("copy_bandwidth") or {}).get("bytes_per_s")
    peaks = peers_doc.get("tensor_core_throughput") or {}
    peer_rows = {e.get("id"): e for e in peers_doc.get("rows", [])}
    flush_bytes = peers_doc.get("flush_bytes") or options.flush_bytes
    out_rows = []
    global_flags = list(global_flags or [])
    missing: set[str] = set()
    speedups_graph, speedups_event, fractions = [], [], []
    speedups_peers: dict[str, list[float]] = {peer: [] for peer in spec.peers}
    for row in rows:
        shape, dtype = tuple(row["shape"]), row["dtype"]
        floor = row_floor(spec.floor, shape, dtype, bandwidth, peaks)
        missing.update(floor["missing"])
        floor_min, floor_two_pass = floor["s_min"], floor["s_two_pass"]
        s_entry = student_rows.get(row["id"]) or {"error": "not recorded"}
        p_entry = peer_rows.get(row["id"], {})
        impls = {STUDENT: _impl_summary(s_entry, floor_min, floor_two_pass)}
        for peer in spec.peers:
            result = (p_entry.get("impls") or {}).get(peer)
            if result is not None:
                impls[peer] = _impl_summary(result, floor_min, floor_two_pass)
                bad = result.get("verified") or {}
                if result.get("error") or any(not v.get("passed") for v in bad.values()):
                    impls[peer]["flags"] = ["peer failed or wrong: " + str(result.get("error") or bad)[:300]]
        flags = student_flags(impls[STUDENT], floor_min) if math.isfinite(floor_min) else ["no floor"]
        if not flags and not median_of(impls.get(spec.baseline, {}).get("graph")):
            # The row says which baseline is missing and why: "some rows were not timed" alone
            # leaves staff nothing to act on.
            why = p_entry.get("error") or (f"its time failed: {impls[spec.baseline]['flags'][0]}"
                                          if impls.get(spec.baseline, {}).get("flags") else
                                          "the peers child left no time for it")
            flags = [f"baseline {spec.baseline} not timed on this row: {str(why)[:300]}"]
        ratio, speedup = {}, {}
        for method in ("event", "graph"):
            s = median_of(impls[STUDENT].get(method))
            b = median_of(impls.get(spec.baseline, {}).get(method))
            if s and b:
                ratio[method] = s / b
                speedup[method] = b / s
        s_graph = median_of(impls[STUDENT].get("graph"))
        probe = p_entry.get("streaming_probe") or {}
        probe_graph = median_of(restat(probe.get("graph")))
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
            for peer in spec.peers:
                peer_graph = median_of(impls.get(peer, {}).get("graph"))
                if peer_graph:
                    speedups_peers[peer].append(peer_graph / s_graph)
        out_rows.append({
            "id": row["id"],
            "shape": list(shape),
            "dtype": dtype,
            "bytes_min": floor["bytes_min"],
            "bytes_two_pass": floor["bytes_two_pass"],
            "floor": floor,
            "floor_s_min": floor_min,
            "floor_s_two_pass": floor_two_pass,
            "impls": impls,
            "ratio_student_over_baseline": ratio,
            "speedup_vs_baseline": speedup,
            "student_bandwidth_fraction_min": impls[STUDENT].get("bandwidth_fraction_min", {}),
            "streaming_probe": streaming_probe,
            "peers_process": p_entry.get("process") or {},
            "flags": flags,
            "ranked": ranked,
            "scope": f"{row['id']}. " + METHOD_SCOPE.format(sets=options.sets, flush_mib=int(flush_bytes or 0) >> 20,
                                                            floor=floor["what"]),
        })
    if missing:
        global_flags.append(f"not measured: {', '.join(sorted(missing))}, so no floor could be checked")
    returncode = peers_doc.get("returncode", 0)
    if returncode != 0 and any(not (peer_rows.get(r["id"]) or {}).get("impls") for r in rows):
        tail = str(peers_doc.get("log_tail") or "")[-400:].strip()
        global_flags.append(f"the peers child ended with status {returncode} before timing every row"
                            + (f": {tail}" if tail else ""))
    all_ranked = bool(out_rows) and all(r["ranked"] for r in out_rows) and not global_flags
    value = geometric_mean(speedups_graph) if all_ranked else None
    reason = None
    if not all_ranked:
        bad = [f"{r['id']}: {r['flags'][0]}" for r in out_rows if not r["ranked"] and r["flags"]]
        reason = "; ".join(global_flags + bad[:3]) or "some rows were not timed"
    return finite_json({
        "schema": SCHEMA_VERSION,
        "headline": {"name": HEADLINE_NAME, "value": value, "baseline": spec.baseline, "method": "graph",
                     "rows": len(out_rows), "reason": reason},
        "summary": {
            "geomean_speedup_vs_baseline_graph": geometric_mean(speedups_graph) if all_ranked else None,
            "geomean_speedup_vs_baseline_event": geometric_mean(speedups_event) if all_ranked else None,
            "geomean_bandwidth_fraction_min_graph": geometric_mean(fractions) if all_ranked else None,
            "geomean_speedup_vs_peer_graph": {peer: geometric_mean(v) if all_ranked else None
                                              for peer, v in speedups_peers.items()},
        },
        "baseline": {"name": spec.baseline, "scope": spec.scopes.get(spec.baseline)},
        "scopes": {**spec.scopes, STUDENT: STUDENT_SCOPE},
        "date_utc": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "gpu": peers_doc.get("gpu"),
        "gpu_after": peers_doc.get("gpu_after"),
        "versions": {**(peers_doc.get("versions") or {}), "grader": grader_version()},
        "copy_bandwidth": peers_doc.get("copy_bandwidth"),
        "tensor_core_throughput": peaks or None,
        "persisting_l2_control": peers_doc.get("persisting_l2_control"),
        "flush_bytes": flush_bytes,
        "options": asdict(options),
        "sandbox": sandbox,
        "flags": global_flags,
        "rows": out_rows,
        "peers_earlier_endings": [_ending_note(ending, len(rows)) for ending in peers_doc.get("earlier_endings") or []],
        "timings_s": {"peers_child": peers_doc.get("duration_s"),
                      "replay_child": (student_info or {}).get("duration_s")},
        "log": (student_info or {}).get("log"),
    })
