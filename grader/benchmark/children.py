"""The peers child: times the assignment's trusted implementations, and its cache.

It never imports a submission: it times the assignment's peers (bench.py's PEERS, torch.compile
of the baseline, the course reference kernel), the device-to-device copy bandwidth and the
streaming probe. It runs trusted code only, so outside the sandbox; its result is cached per
GPU, software, options and reference source (``cached_peers``). It runs
grader/harness/bench_child.py from a staged harness folder that also holds the assignment's
bench.py as ``assignment_bench.py``. (The submission is timed by the replay process,
grader/children/replay_process.py.)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from grader.assignments.protocol import Assignment
from grader.benchmark.options import BenchmarkOptions, benchmark_rows
from grader.benchmark.verify import verify_rows
from grader.harness.protocol import PeerRowPlan, PeersEnding, PeersPlan, PeersResult, TimingOptions
from grader.sandbox.run import HARNESS_SOURCE, stage_harness
from grader.version import grader_version, package_version

HARNESS_NAME = "bench_child.py"


def _stage(assignment: Assignment, settings) -> Path:
    """A fresh private folder with the harness scripts and the assignment's bench.py, outside
    every folder a child may write to (the caller removes it)."""
    root = Path(tempfile.mkdtemp(prefix="bench-harness-", dir=getattr(settings, "work_root", None) or None))
    return stage_harness(root, {"assignment_bench.py": assignment.benchmark.bench_file}) / HARNESS_NAME


def write_plan(workdir: Path, *, rows: list[dict], options: BenchmarkOptions, assignment: Assignment,
                reference_file: str | None) -> None:
    from grader.benchmark.verify import timed_verification

    plan = PeersPlan(rows=[PeerRowPlan(**{k: row[k] for k in ("id", "shape", "dtype", "seed")}) for row in rows],
                     options=TimingOptions(**options.child_options(),
                                           tensor_core_peak=assignment.benchmark.floor.kind != "bandwidth"),
                     function=assignment.manifest.function, module_file=assignment.manifest.module_file,
                     selection=timed_verification(assignment, rows[0]["dtype"] if rows else assignment.benchmark.dtypes[0]),
                     reference_file=reference_file)
    (workdir / "bench_plan.json").write_text(plan.model_dump_json())


def read_child_result(workdir: Path) -> dict | None:
    """``bench_result.json`` (complete) or else ``bench_progress.json`` (stopped early), read as
    a ``PeersResult`` and returned as a dict (the benchmark adds its verification), or None.

    Raises:
        ChildFileRejected: one of them is a link, a FIFO, a device, ... (grader/evidence/child_files.py).
    """
    from grader.evidence.child_files import RESULT, ChildFolder

    for name in ("bench_result.json", "bench_progress.json"):
        raw = ChildFolder(workdir).read(name, RESULT)
        if raw is not None:
            try:
                document = PeersResult.model_validate_json(raw)
            except ValueError:
                return None
            return document.model_copy(update={"complete": name == "bench_result.json"}).model_dump()
    return None


def run_peers(assignment: Assignment, *, options: BenchmarkOptions | None = None, settings=None,
              rows: list[dict] | None = None) -> dict:
    """Time the peers and the copy bandwidth in a child that never imports a submission.

    A child that ended badly (a non-zero status) before reaching every row is followed by one
    more child for the rows it did not reach; how the first one ended is kept in
    ``earlier_endings`` (a ``PeersEnding`` each) and shown beside the benchmark. The peers are
    trusted code and their timings do not depend on the process that made them (each child
    measures from a cold start, with its own warm-up), so the second child's rows are as good
    as the first's; the floors use the first child's measured bandwidth and peaks throughout.
    A child that ran out of its time (``peers_timeout_s``) is not followed: the time is spent.

    Returns {"gpu", "versions", "copy_bandwidth", "rows": [{id, impls: {...}}], ...} with each
    implementation's outputs already re-verified (``verified``), ``returncode`` and
    ``log_tail`` of the last child, and ``duration_s`` (seconds, every child together).
    """
    options = options or BenchmarkOptions()
    rows = rows or benchmark_rows(assignment.benchmark, options)
    started = time.monotonic()
    document = _one_peers_child(assignment, options=options, settings=settings, rows=rows)
    reached = {entry.get("id") for entry in document.get("rows", [])}
    rest = [row for row in rows if row["id"] not in reached]
    returncode = document.get("returncode")
    if rest and returncode not in (0, None):
        ending = PeersEnding(returncode=returncode, log_tail=document.get("log_tail") or "",
                             rows_done=len(reached))
        second = _one_peers_child(assignment, options=options, settings=settings, rows=rest)
        for key, value in second.items():
            if key == "rows":
                continue
            if key in ("returncode", "log_tail", "complete", "error", "finished_unix", "gpu_after") \
                    or document.get(key) in (None, {}, []):
                document[key] = value
        document["rows"] = [*document.get("rows", []), *second.get("rows", [])]
        document["earlier_endings"] = [*document.get("earlier_endings", []), ending.model_dump()]
    document["duration_s"] = time.monotonic() - started
    return document


def _one_peers_child(assignment: Assignment, *, options: BenchmarkOptions, settings, rows: list[dict]) -> dict:
    """One peers child on ``rows`` in a fresh work folder: its document (``PeersResult`` as a
    dict, or {"error", "rows": []} when it left none), its outputs re-verified, with its
    ``returncode`` (None when it ran out of ``peers_timeout_s``) and the end of its log."""
    work_root = getattr(settings, "work_root", None) if settings is not None else None
    workdir = Path(tempfile.mkdtemp(prefix="bench-peers-", dir=work_root))
    harness = _stage(assignment, settings)
    try:
        shutil.copy(assignment.reference_file, workdir / "course_reference.py")
        peer_options = BenchmarkOptions(**{**asdict(options), "save_full": False})
        write_plan(workdir, rows=rows, options=peer_options, assignment=assignment,
                    reference_file="course_reference.py")
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        try:
            proc = subprocess.run([sys.executable, "-I", str(harness), str(workdir)], cwd=workdir, env=env,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=options.peers_timeout_s)
            log_tail, returncode = (proc.stdout + proc.stderr)[-4000:], proc.returncode
        except subprocess.TimeoutExpired as exc:
            log_tail, returncode = f"timed out after {options.peers_timeout_s} s: {str(exc.stderr)[-2000:]}", None
        document = read_child_result(workdir) or {"error": "the peers process left no result", "rows": []}
        document["returncode"] = returncode
        document["log_tail"] = log_tail
        verify_rows(assignment, document, workdir, rows, options.sets)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(harness.parent, ignore_errors=True)
    return document


def _peers_cache_path(assignment: Assignment, options: BenchmarkOptions, settings) -> Path:
    """Where a peers result for this GPU, software, options and reference source is cached."""
    import torch

    props = torch.cuda.get_device_properties(0)
    harness_digest = hashlib.sha256()
    for path in sorted(HARNESS_SOURCE.glob("*.py")):
        harness_digest.update(path.read_bytes())
    key = json.dumps({
        "gpu": props.name, "uuid": str(getattr(props, "uuid", "")), "torch": torch.__version__,
        "triton": package_version("triton"), "grader": grader_version(), "assignment": assignment.manifest.name,
        "options": {k: v for k, v in asdict(options).items() if k not in ("student_timeout_s", "peers_cache_s", "save_full")},
        "reference": hashlib.sha256(assignment.reference_file.read_bytes()).hexdigest(),
        "bench": hashlib.sha256(assignment.benchmark.bench_file.read_bytes()).hexdigest(),
        "harness": harness_digest.hexdigest(),
    }, sort_keys=True, default=str)
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    return peers_cache_folder(settings) / f"grader-bench-peers-{digest}.json"


def peers_cache_folder(settings) -> Path:
    """The folder of the peers cache: ``settings.peers_cache_dir``, else
    ``<temp dir>/grader-peers-<uid>``, made 0700 and refused when it is not this user's own
    folder. Never a grading's folder (``work_root``): a worker removes that after every
    grading, and ``grader check`` mounts a tmpfs there that ends with it, so a cache kept there
    would re-time the peers on every grading (40-45 s on the H200, run3-diagnosis)."""
    folder = Path(getattr(settings, "peers_cache_dir", None) or Path(tempfile.gettempdir()) / f"grader-peers-{os.getuid()}")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.lstat()
    if folder.is_symlink() or not folder.is_dir() or info.st_uid != os.geteuid():
        raise OSError(f"{folder} is not a folder of this user's; remove it, or set GRADER_PEERS_CACHE_DIR")
    return folder


def cached_peers(assignment: Assignment, *, options: BenchmarkOptions, settings, rows: list[dict]) -> dict:
    """A cached peers result if one is young enough, else ``run_peers`` (and cache it)."""
    path = _peers_cache_path(assignment, options, settings) if options.peers_cache_s > 0 else None
    if path is not None and path.exists() and time.time() - path.stat().st_mtime < options.peers_cache_s:
        try:
            document = json.loads(path.read_text())
            document["cached_from"] = str(path)
            return document
        except (OSError, ValueError):
            pass
    document = run_peers(assignment, options=options, settings=settings, rows=rows)
    usable = (document.get("copy_bandwidth") or {}).get("bytes_per_s") and not document.get("error")
    if path is not None and usable:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(document, default=str))
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    return document
