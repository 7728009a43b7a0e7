"""Similarity review (staff): which pairs of students' submissions, and which submissions and
known public kernels, share more code than the starter template explains.

- Staff queue a review of an assignment (`request_run`, audited); a worker claims it from
  ``similarity_runs`` when no grading is waiting (submissions/worker.py) and runs
  `execute_run`: each student's counted submission of the assignment (the one their grade
  comes from, chosen by the gradebook's one rule: `COUNTED`; their latest upload while
  nothing counts yet: `LATEST_UPLOAD`), compared with every other and with every known
  source (the assignment's reference, read from the grader's folder, and the public kernels
  staff added), the starter template subtracted, by the engine of
  submissions/similarity_engine.py (copydetect), in a child process with a time and memory
  limit (the texts are hostile). Never in a request: a class of 300 takes seconds to
  a minute (docs/similarity/).
- The latest finished run's pairs at or above a threshold are listed with both texts and
  their matched fragments; staff mark a pair reviewed (audited; a later run carries the mark
  over for the same two texts) and export the pairs as CSV (cells through `safe_cell`).
- Nothing is decided here: a pair informs a disqualification, which stays a staff action
  (submissions/moderation.py).

Texts are hostile: the engine only tokenizes them; every renderer escapes them.
"""

from __future__ import annotations

import ast
import csv
import datetime as dt
import hashlib
import io
import logging
import os
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from submissions import assignments, audit, repository, standings
from submissions.csv_cells import safe_cell
from submissions.errors import (
    SimilarityPairNotFound,
    SimilarityRunInProgress,
    SimilarityRunNotFound,
    SimilaritySourceInvalid,
    SimilaritySourceNameTaken,
    SimilaritySourceNotFound,
    SimilarityThresholdInvalid,
)
from submissions.grading import grader_environment, parent_death_signal_setter
from submissions.models import (
    SimilarityPair,
    SimilarityRun,
    SimilaritySource,
    SimilaritySourceKind,
    utc_now,
)
from submissions.repository import ClaimedSimilarityRun, PairRow
from submissions.similarity_engine import DocumentIn, ReviewJob, ReviewResult

logger = logging.getLogger("submissions.similarity")

#: The threshold a run uses unless staff choose another (similarity_engine.DEFAULT_THRESHOLD,
#: repeated here so that the API never imports the engine's module).
DEFAULT_THRESHOLD = 0.6
#: The review child's wall-clock limit: a class of 300 took a minute on the loaded 2-core dev
#: machine (docs/similarity/); ten times that is a text the lexer cannot cope with.
REVIEW_TIMEOUT_S = 600.0
#: Its address-space cap (numpy and matplotlib map a few hundred MiB; a class's texts, MiBs).
REVIEW_MEMORY_BYTES = 4 * 1024**3
#: A review's lease: not renewed, so longer than the child's limit.
LEASE_S = REVIEW_TIMEOUT_S + 300.0
_SET_PARENT_DEATH_SIGNAL = parent_death_signal_setter()
MAX_SOURCE_BYTES = 256 * 1024
MAX_NAME_CHARS = 200
MAX_NOTE_CHARS = 2000
REFERENCE_NAME = "reference.py (the assignment's reference)"
ACTOR_WORKER = "worker"

CSV_COLUMNS = (
    "run_id", "pair_id", "similarity", "left_similarity", "right_similarity", "matched_chars",
    "left_submission_id", "left_student_id", "left_student", "right_kind",
    "right_submission_id", "right_student_id", "right_student", "right_source",
    "reviewed_at", "reviewed_by", "review_note", "left_compared_as", "right_compared_as",
)

#: What a review compared of a student (`compared_as`): the submission their grade came from
#: when the review ran (submissions/standings.py ``counted_submissions``), or their latest
#: upload: nothing counted yet (counting ``best`` and none of their uploads graded yet), or a
#: review run before the counted submission was compared (its parameters lack ``compared``).
COUNTED, LATEST_UPLOAD = "counted", "latest_upload"


def compared_as(run: SimilarityRun, submission_id: int) -> str:
    """`COUNTED` or `LATEST_UPLOAD`: what `run` compared of the student of `submission_id`
    (read from the run's ``parameters``: ``compared`` and ``latest_upload_ids``)."""
    parameters = run.parameters or {}
    if parameters.get("compared") != COUNTED:
        return LATEST_UPLOAD
    return LATEST_UPLOAD if submission_id in parameters.get("latest_upload_ids", ()) else COUNTED


# ------------------------------------------------------------------------------ requests


def request_run(session: Session, *, assignment: str, threshold: float | None,
                actor: audit.Actor, now: dt.datetime) -> SimilarityRun:
    """Queue a review of `assignment` (a worker runs it); audited.

    Raises:
        UnknownAssignment: not in the manifest.
        SimilarityThresholdInvalid: `threshold` not in (0, 1].
        SimilarityRunInProgress: a review of it is already queued or running.
    """
    manifest = assignments.resolve_manifest(assignment)
    threshold = DEFAULT_THRESHOLD if threshold is None else threshold
    if not 0 < threshold <= 1:
        raise SimilarityThresholdInvalid(f"threshold must be in (0, 1], got {threshold}")
    running = repository.unfinished_similarity_run(session, assignment=manifest.name)
    if running is not None:
        raise SimilarityRunInProgress(
            f"similarity review {running.id} of {manifest.name} is {running.status}",
            run_id=running.id)
    run = repository.insert_similarity_run(session, assignment=manifest.name,
                                           threshold=threshold, requested_by=actor.label, now=now)
    audit.record(session, actor=actor, action="similarity.run", now=now,
                 target_type="similarity_run", target_id=run.id, assignment=manifest.name,
                 details={"threshold": threshold})
    return run


@dataclass(frozen=True)
class Overview:
    """What the staff page and ``GET .../similarity`` show: the latest finished run and its
    pairs at or above `min_similarity`, and the run under way, if any."""

    assignment: str
    run: SimilarityRun | None
    pending: SimilarityRun | None
    pairs: list[SimilarityPair]
    min_similarity: float
    sources: list[SimilaritySource]
    total: int  # pairs at or above min_similarity (`pairs` is one page of them)


#: Pairs in one answer or page unless the caller asks for fewer (a class built from a few
#: public kernels has thousands of pairs: docs/similarity/).
PAGE_SIZE = 500


def overview(session: Session, *, assignment: str, min_similarity: float | None,
             limit: int | None = PAGE_SIZE, offset: int = 0) -> Overview:
    """The latest finished review of `assignment` (pairs at or above `min_similarity`, by
    default the run's own threshold; `limit` of them from `offset`, most similar first) and
    the one queued or running.

    Raises:
        UnknownAssignment: not in the manifest.
        SimilarityThresholdInvalid: `min_similarity` outside [0, 1].
    """
    name = assignments.resolve_manifest(assignment).name
    if min_similarity is not None and not 0 <= min_similarity <= 1:
        raise SimilarityThresholdInvalid(f"min_similarity must be in [0, 1], got {min_similarity}")
    run = repository.latest_similarity_run(session, assignment=name, finished=True)
    pending = repository.unfinished_similarity_run(session, assignment=name)
    last = repository.latest_similarity_run(session, assignment=name)
    if last is not None and last.status == "error" and (run is None or last.id > run.id):
        pending = last  # the newest attempt failed: shown with its message
    floor = run.threshold if run is not None and min_similarity is None else (min_similarity or 0.0)
    pairs = list(repository.list_similarity_pairs(session, run_id=run.id, min_similarity=floor,
                                                  limit=limit, offset=offset)
                 ) if run is not None else []
    total = repository.count_similarity_pairs(session, run_id=run.id, min_similarity=floor
                                              ) if run is not None else 0
    return Overview(assignment=name, run=run, pending=pending, pairs=pairs, min_similarity=floor,
                    sources=list(repository.list_similarity_sources(session, assignment=name)),
                    total=total)


def sources(session: Session, *, assignment: str) -> list[SimilaritySource]:
    """The known sources of `assignment` (reference, public, retired).

    Raises:
        UnknownAssignment: not in the manifest.
    """
    name = assignments.resolve_manifest(assignment).name
    return list(repository.list_similarity_sources(session, assignment=name))


def get_pair(session: Session, *, assignment: str, pair_id: int) -> SimilarityPair:
    """One pair of a review of `assignment`.

    Raises:
        UnknownAssignment: not in the manifest.
        SimilarityPairNotFound: no such pair in this assignment's reviews.
    """
    name = assignments.resolve_manifest(assignment).name
    pair = repository.get_similarity_pair(session, pair_id=pair_id)
    if pair is None or pair.left.assignment != name:
        raise SimilarityPairNotFound(f"no similarity pair {pair_id} in {name}")
    return pair


def review_pair(session: Session, *, assignment: str, pair_id: int, reviewed: bool,
                note: str | None, actor: audit.Actor, now: dt.datetime) -> SimilarityPair:
    """Mark a pair reviewed (with an optional note) or not reviewed again; audited. It
    decides nothing: disqualifying stays its own action.

    Raises:
        UnknownAssignment, SimilarityPairNotFound: as `get_pair`.
    """
    pair = get_pair(session, assignment=assignment, pair_id=pair_id)
    note = (note or "").strip()[:MAX_NOTE_CHARS] or None
    if reviewed:
        repository.set_similarity_review(session, pair_id=pair.id, at=now, by=actor.label, note=note)
    else:
        repository.set_similarity_review(session, pair_id=pair.id, at=None, by=None, note=None)
    audit.record(session, actor=actor, action="similarity.review" if reviewed else "similarity.unreview",
                 now=now, target_type="similarity_pair", target_id=pair.id,
                 assignment=pair.left.assignment,
                 details={"run_id": pair.run_id, "left_submission_id": pair.left_submission_id,
                          "right_submission_id": pair.right_submission_id,
                          "right_source_id": pair.right_source_id,
                          "similarity": round(pair.similarity, 4), "note": note})
    session.refresh(pair)
    return pair


# ------------------------------------------------------------------------------- sources


def add_source(session: Session, *, assignment: str, name: str, origin: str | None, text: str,
               actor: audit.Actor, now: dt.datetime) -> SimilaritySource:
    """Add a known public kernel (a library's, a tutorial's) that every submission of
    `assignment` is compared with from the next review on; audited.

    Raises:
        UnknownAssignment: not in the manifest.
        SimilaritySourceInvalid: empty or too long name; empty, too large or not Python text.
        SimilaritySourceNameTaken: the assignment has a source of that name.
    """
    manifest = assignments.resolve_manifest(assignment)
    name = name.strip()
    if not name or len(name) > MAX_NAME_CHARS:
        raise SimilaritySourceInvalid(f"name: 1 to {MAX_NAME_CHARS} characters")
    size = len(text.encode("utf-8", "surrogatepass"))
    if not text.strip() or size > MAX_SOURCE_BYTES:
        raise SimilaritySourceInvalid(f"text: 1 to {MAX_SOURCE_BYTES} bytes of Python, got {size}")
    try:
        ast.parse(text)
    except (SyntaxError, ValueError) as exc:
        raise SimilaritySourceInvalid(f"text is not Python: {exc}") from None
    if any(s.name.casefold() == name.casefold()
           for s in repository.list_similarity_sources(session, assignment=manifest.name)):
        raise SimilaritySourceNameTaken(f"{manifest.name} already has a source named {name!r}")
    origin = (origin or "").strip()[:2000] or None
    source = repository.insert_similarity_source(
        session, assignment=manifest.name, kind=SimilaritySourceKind.PUBLIC, name=name,
        origin=origin, source_text=text, source_sha256=hashlib.sha256(text.encode()).hexdigest(),
        added_by=actor.label, now=now)
    audit.record(session, actor=actor, action="similarity.source_add", now=now,
                 target_type="similarity_source", target_id=source.id, assignment=manifest.name,
                 details={"name": name, "origin": origin, "sha256": source.source_sha256})
    return source


def remove_source(session: Session, *, assignment: str, source_id: int, actor: audit.Actor,
                  now: dt.datetime) -> None:
    """Remove a public source (and its pairs); audited. The reference is not removable: it is
    the grader's, and every review reads it again.

    Raises:
        UnknownAssignment: not in the manifest.
        SimilaritySourceNotFound: no such public source of the assignment.
    """
    name = assignments.resolve_manifest(assignment).name
    source = repository.get_similarity_source(session, source_id=source_id)
    if source is None or source.assignment != name or source.kind != SimilaritySourceKind.PUBLIC:
        raise SimilaritySourceNotFound(f"no public source {source_id} of {name}")
    audit.record(session, actor=actor, action="similarity.source_remove", now=now,
                 target_type="similarity_source", target_id=source.id, assignment=name,
                 details={"name": source.name, "sha256": source.source_sha256})
    repository.delete_similarity_source(session, source_id=source.id)


# -------------------------------------------------------------------------------- export


def csv_export(session: Session, *, assignment: str, min_similarity: float | None,
               actor: audit.Actor, now: dt.datetime) -> str:
    """The latest finished review's pairs (CSV_COLUMNS, most similar first; every cell
    through `safe_cell`: names and source names are anyone's text; ``*_compared_as``:
    `compared_as`, empty for a source); audited.

    Raises:
        UnknownAssignment, SimilarityThresholdInvalid: as `overview`.
        SimilarityRunNotFound: no finished review yet.
    """
    view = overview(session, assignment=assignment, min_similarity=min_similarity, limit=None)
    if view.run is None:
        raise SimilarityRunNotFound(f"{view.assignment} has no finished similarity review yet")
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for pair in view.pairs:
        right = pair.right
        writer.writerow([safe_cell(v) for v in (
            view.run.id, pair.id, f"{pair.similarity:.4f}", f"{pair.left_similarity:.4f}",
            f"{pair.right_similarity:.4f}", pair.matched_chars, pair.left_submission_id,
            pair.left.student_id, pair.left.student.name,
            "submission" if right is not None else "source",
            pair.right_submission_id, right.student_id if right else None,
            right.student.name if right else None, pair.source.name if pair.source else None,
            assignments.iso_utc(pair.reviewed_at) if pair.reviewed_at else None,
            pair.reviewed_by, pair.review_note, compared_as(view.run, pair.left_submission_id),
            compared_as(view.run, right.id) if right is not None else None)])
    audit.record(session, actor=actor, action="similarity.export", now=now,
                 target_type="similarity_run", target_id=view.run.id, assignment=view.assignment,
                 details={"pairs": len(view.pairs), "min_similarity": view.min_similarity})
    return buffer.getvalue()


# ------------------------------------------------------------------------------ rendering


@dataclass(frozen=True)
class Segment:
    """A run of a text, matched (`marked`) or not; the renderer escapes `text`."""

    text: str
    marked: bool


def segments(text: str, fragments: list[list[int]] | list[tuple[int, int]]) -> list[Segment]:
    """`text` cut at the fragments' edges (fragments sorted, not overlapping, within it)."""
    out: list[Segment] = []
    at = 0
    for start, end in fragments:
        start, end = max(start, at), min(end, len(text))
        if start > at:
            out.append(Segment(text[at:start], False))
        if end > start:
            out.append(Segment(text[start:end], True))
        at = max(at, end)
    if at < len(text):
        out.append(Segment(text[at:], False))
    return out


# --------------------------------------------------------------------------- the worker


def _read(path: object) -> str | None:
    try:
        return path.read_text(encoding="utf-8")  # type: ignore[attr-defined]
    except OSError:
        return None


def _review_child_preexec() -> None:
    """Between fork and exec of the review child: die with the worker's thread, and a cap
    on its address space (a text that blows the lexer up fails the review, not the host)."""
    if _SET_PARENT_DEATH_SIGNAL is not None:
        _SET_PARENT_DEATH_SIGNAL()
    resource.setrlimit(resource.RLIMIT_AS, (REVIEW_MEMORY_BYTES, REVIEW_MEMORY_BYTES))


def _run_child(job: ReviewJob, *, timeout_s: float, cancel: threading.Event | None
               ) -> ReviewResult | str | None:
    """Run the review child on `job`: its result, a reason it failed (str), or None when
    `cancel` was set first (the child is killed, or never started when it already was)."""
    if cancel is not None and cancel.is_set():
        # A review may finish inside one poll interval: a worker already stopping must
        # hand it back all the same, not store an outcome after it was told to stop.
        return None
    environment = grader_environment(os.environ)
    # The child imports this package from wherever the worker did (a checkout or a wheel).
    package_root = str(Path(__file__).resolve().parent.parent)
    environment["PYTHONPATH"] = os.pathsep.join(
        filter(None, [package_root, environment.get("PYTHONPATH")]))
    environment["OPENBLAS_NUM_THREADS"] = environment["OMP_NUM_THREADS"] = "1"
    process = subprocess.Popen(  # noqa: S603 - argv list, no shell
        [sys.executable, "-m", "submissions.similarity_engine"], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment,
        preexec_fn=_review_child_preexec)  # noqa: PLW1509 - two async-signal-safe calls
    deadline = time.monotonic() + timeout_s
    payload: bytes | None = job.model_dump_json().encode()
    while True:
        try:
            # Polls every 0.5 s for `cancel`, never past the deadline.
            wait_s = min(0.5, max(0.0, deadline - time.monotonic()))
            stdout, stderr = process.communicate(payload, timeout=wait_s)
            break
        except subprocess.TimeoutExpired:
            payload = None  # already being written; communicate() goes on with it
            if cancel is not None and cancel.is_set():
                process.kill()
                process.communicate()
                return None
            if time.monotonic() >= deadline:
                process.kill()
                process.communicate()
                return f"the review took longer than {timeout_s:g} s and was stopped"
    if process.returncode != 0:
        tail = stderr.decode("utf-8", "replace").strip().splitlines()[-5:]
        return f"the review failed (exit {process.returncode}): " + " | ".join(tail)
    try:
        return ReviewResult.model_validate_json(stdout)
    except ValueError as exc:
        return f"the review's answer was unreadable: {exc}"


def execute_run(session_factory: sessionmaker[Session], claimed: ClaimedSimilarityRun, *,
                now: Callable[[], dt.datetime] = utc_now, timeout_s: float | None = None,
                cancel: threading.Event | None = None) -> bool:
    """Run a claimed review: read what it compares (one short transaction: each student's
    counted submission, else their latest upload, `COUNTED`; the known sources), compare in a
    child process (no transaction open; `timeout_s`, default REVIEW_TIMEOUT_S), store the
    pairs (one transaction, fenced by the lease). Returns True when the outcome was stored.
    A child that fails or runs out of time marks the run ``error`` with the reason (not
    retried: the same texts would fail again); `cancel` (the worker stopping) kills the
    child and hands the run back to the queue. Raises sqlalchemy errors (the worker's loop
    logs them; the lease expires and the run is claimed again)."""
    manifest = assignments.resolve_manifest(claimed.assignment)
    template = _read(manifest.template_file)
    reference = _read(manifest.template_file.parent / "reference.py")
    with session_factory.begin() as session:
        if reference is not None:
            repository.upsert_reference_source(
                session, assignment=manifest.name, name=REFERENCE_NAME, source_text=reference,
                source_sha256=hashlib.sha256(reference.encode()).hexdigest(),
                added_by=ACTOR_WORKER, now=now())
        # The one rule of what counts (the gradebook's), never a second one here.
        counted = standings.counted_submissions(session, assignment=manifest.name, now=now())
        chosen = repository.submissions_to_review(session, assignment=manifest.name,
                                                  counted_ids=counted.values())
        latest_uploads = sorted(s.id for s in chosen if counted.get(s.student_id) != s.id)
        students = [DocumentIn(kind="submission", id=s.id, text=s.source_text) for s in chosen]
        known = [DocumentIn(kind="source", id=s.id, text=s.source_text)
                 for s in repository.compared_similarity_sources(session,
                                                                 assignment=manifest.name)]
        carried = {key: (p.reviewed_at, p.reviewed_by, p.review_note) for key, p
                   in repository.previous_similarity_reviews(session, assignment=manifest.name).items()}
    job = ReviewJob(students=students, sources=known,
                    boilerplate=[template] if template is not None else [],
                    threshold=claimed.threshold)
    result = _run_child(job, timeout_s=REVIEW_TIMEOUT_S if timeout_s is None else timeout_s,
                        cancel=cancel)
    if result is None:
        with session_factory.begin() as session:
            repository.release_similarity_run(session, run_id=claimed.run_id,
                                              lease_token=claimed.lease_token)
        return False
    if isinstance(result, str):
        logger.warning("similarity review %s: %s", claimed.run_id, result)
        with session_factory.begin() as session:
            repository.fail_similarity_run(session, run_id=claimed.run_id,
                                           lease_token=claimed.lease_token,
                                           message=result[:2000], now=now())
        return False
    rows = []
    for finding in result.pairs:
        right_submission = finding.right[1] if finding.right[0] == "submission" else None
        right_source = finding.right[1] if finding.right[0] == "source" else None
        mark = carried.get((finding.left[1], right_submission, right_source), (None, None, None))
        rows.append(PairRow(
            left_submission_id=finding.left[1], right_submission_id=right_submission,
            right_source_id=right_source, similarity=finding.similarity,
            left_similarity=finding.left_similarity, right_similarity=finding.right_similarity,
            matched_chars=finding.matched_chars,
            left_fragments=[list(f) for f in finding.left_fragments],
            right_fragments=[list(f) for f in finding.right_fragments],
            reviewed_at=mark[0], reviewed_by=mark[1], review_note=mark[2]))
    parameters = {**result.parameters, "template": template is not None,
                  "reference": reference is not None, "compared": COUNTED,
                  "latest_upload_ids": latest_uploads}
    with session_factory.begin() as session:
        stored = repository.store_similarity_outcome(
            session, run_id=claimed.run_id, lease_token=claimed.lease_token, pairs=rows,
            tool=result.tool, parameters=parameters, submissions_compared=len(students),
            sources_compared=len(known), pairs_compared=result.pairs_compared,
            duration_s=result.duration_s, now=now())
    if not stored:
        logger.warning("similarity review %s: lease lost; outcome discarded", claimed.run_id)
    return stored
