"""Similarity review of an assignment (staff): queue a review (a worker runs it), read the
pairs at or above a threshold with their matched fragments, mark a pair reviewed, export the
pairs as CSV, and keep the known public sources every submission is compared with
(submissions/similarity.py). Nothing here decides anything: disqualification stays
``POST /api/v1/submissions/{id}/disqualify``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, status
from fastapi.responses import Response

from api.deps import NowDep, SessionDep, StaffOnly
from api.params import MAX_DB_INT, AssignmentName, Offset
from api.schemas import (
    ErrorResponse,
    SimilarityOverview,
    SimilarityPairRead,
    SimilarityReview,
    SimilarityRunCreate,
    SimilarityRunRead,
    SimilaritySide,
    SimilaritySourceCreate,
    SimilaritySourceList,
    SimilaritySourceRead,
)
from submissions import similarity
from submissions.models import SimilarityPair, SimilarityRun, SimilaritySource

router = APIRouter(prefix="/api/v1/assignments", tags=["similarity"])

PairId = Annotated[int, Path(ge=1, le=MAX_DB_INT, description="a similarity pair's id")]
SourceId = Annotated[int, Path(ge=1, le=MAX_DB_INT, description="a known source's id")]
MinSimilarity = Annotated[float | None, Query(
    ge=0, le=1, description="list pairs at or above it (default: the run's threshold)")]

_UNKNOWN = {422: {"model": ErrorResponse, "description": "unknown_assignment"}}
_PAIR = {**_UNKNOWN, 404: {"model": ErrorResponse, "description": "similarity_pair_not_found"}}


def run_read(run: SimilarityRun | None) -> SimilarityRunRead | None:
    """The API's view of a run."""
    if run is None:
        return None
    return SimilarityRunRead(
        id=run.id, assignment=run.assignment, status=run.status, threshold=run.threshold,
        requested_by=run.requested_by, created_at=run.created_at, started_at=run.started_at,
        finished_at=run.finished_at, error_message=run.error_message, tool=run.tool,
        parameters=run.parameters, submissions_compared=run.submissions_compared,
        sources_compared=run.sources_compared, pairs_compared=run.pairs_compared,
        duration_s=run.duration_s)


def pair_read(pair: SimilarityPair, *, with_text: bool = False) -> SimilarityPairRead:
    """The API's view of a pair (with both texts for a single pair)."""
    left = SimilaritySide(
        kind="submission", submission_id=pair.left_submission_id,
        student_id=pair.left.student_id, student_name=pair.left.student.name,
        compared_as=similarity.compared_as(pair.run, pair.left_submission_id),
        similarity=pair.left_similarity, fragments=[tuple(f) for f in pair.left_fragments],
        text=pair.left.source_text if with_text else None)
    if pair.right is not None:
        right = SimilaritySide(
            kind="submission", submission_id=pair.right_submission_id,
            student_id=pair.right.student_id, student_name=pair.right.student.name,
            compared_as=similarity.compared_as(pair.run, pair.right.id),
            similarity=pair.right_similarity, fragments=[tuple(f) for f in pair.right_fragments],
            text=pair.right.source_text if with_text else None)
    else:
        assert pair.source is not None  # noqa: S101 - the check constraint one_right
        right = SimilaritySide(
            kind="source", source_id=pair.right_source_id, source_name=pair.source.name,
            similarity=pair.right_similarity, fragments=[tuple(f) for f in pair.right_fragments],
            text=pair.source.source_text if with_text else None)
    return SimilarityPairRead(
        id=pair.id, run_id=pair.run_id, similarity=pair.similarity,
        matched_chars=pair.matched_chars, left=left, right=right,
        reviewed_at=pair.reviewed_at, reviewed_by=pair.reviewed_by, review_note=pair.review_note)


def source_read(source: SimilaritySource) -> SimilaritySourceRead:
    return SimilaritySourceRead(
        id=source.id, assignment=source.assignment, kind=source.kind, name=source.name,
        origin=source.origin, source_sha256=source.source_sha256,
        bytes=len(source.source_text.encode("utf-8")), added_by=source.added_by,
        added_at=source.added_at)


@router.post("/{name}/similarity", status_code=status.HTTP_202_ACCEPTED,
             response_model=SimilarityRunRead,
             responses={**_UNKNOWN, 409: {"model": ErrorResponse,
                                          "description": "similarity_run_in_progress"}})
def start_similarity_review(name: AssignmentName, principal: StaffOnly, session: SessionDep,
                            now: NowDep, body: SimilarityRunCreate | None = None
                            ) -> SimilarityRunRead:
    """Queue a similarity review (staff): each student's counted submission (the one their
    grade comes from; their latest upload while nothing counts yet) compared with every other
    and with the known sources, the starter template subtracted. 202: a worker
    runs it; poll `GET .../similarity`. Audited."""
    run = similarity.request_run(session, assignment=name,
                                 threshold=body.threshold if body else None,
                                 actor=principal.actor, now=now)
    return run_read(run)  # type: ignore[return-value]


@router.get("/{name}/similarity", response_model=SimilarityOverview, responses=_UNKNOWN)
def read_similarity(name: AssignmentName, _: StaffOnly, session: SessionDep,
                    min_similarity: MinSimilarity = None,
                    limit: Annotated[int, Query(ge=1, le=5000)] = similarity.PAGE_SIZE,
                    offset: Offset = 0) -> SimilarityOverview:
    """The latest finished review's pairs, most similar first, `limit` from `offset` (staff;
    without the texts: `GET .../similarity/pairs/{id}` has them), and the review under way or
    failed since."""
    view = similarity.overview(session, assignment=name, min_similarity=min_similarity,
                               limit=limit, offset=offset)
    return SimilarityOverview(assignment=view.assignment, run=run_read(view.run),
                              pending=run_read(view.pending), min_similarity=view.min_similarity,
                              total=view.total, pairs=[pair_read(p) for p in view.pairs])


@router.get("/{name}/similarity/pairs/{pair_id}", response_model=SimilarityPairRead,
            responses=_PAIR)
def read_similarity_pair(name: AssignmentName, pair_id: PairId, _: StaffOnly,
                         session: SessionDep) -> SimilarityPairRead:
    """One pair with both texts and their matched fragments (staff). The texts are the
    students' (hostile): render them as text."""
    return pair_read(similarity.get_pair(session, assignment=name, pair_id=pair_id),
                     with_text=True)


@router.post("/{name}/similarity/pairs/{pair_id}/review", response_model=SimilarityPairRead,
             responses=_PAIR)
def review_similarity_pair(name: AssignmentName, pair_id: PairId, body: SimilarityReview,
                           principal: StaffOnly, session: SessionDep,
                           now: NowDep) -> SimilarityPairRead:
    """Mark a pair reviewed, with an optional note (or clear the mark with
    `reviewed: false`). Audited. It decides nothing."""
    pair = similarity.review_pair(session, assignment=name, pair_id=pair_id,
                                  reviewed=body.reviewed, note=body.note,
                                  actor=principal.actor, now=now)
    return pair_read(pair)


@router.get("/{name}/similarity/export", response_class=Response, responses={
    200: {"content": {"text/csv": {}}, "description": ",".join(similarity.CSV_COLUMNS)},
    **_UNKNOWN, 404: {"model": ErrorResponse, "description": "similarity_run_not_found"}})
def export_similarity(name: AssignmentName, principal: StaffOnly, session: SessionDep,
                      now: NowDep, min_similarity: MinSimilarity = None) -> Response:
    """The latest finished review's pairs as CSV (staff; audited)."""
    text = similarity.csv_export(session, assignment=name, min_similarity=min_similarity,
                                 actor=principal.actor, now=now)
    return Response(text, media_type="text/csv; charset=utf-8", headers={
        "Content-Disposition": f'attachment; filename="similarity-{name}.csv"',
        "Cache-Control": "no-store"})


@router.get("/{name}/similarity/sources", response_model=SimilaritySourceList,
            responses=_UNKNOWN)
def list_similarity_sources(name: AssignmentName, _: StaffOnly,
                            session: SessionDep) -> SimilaritySourceList:
    """The known sources every submission is compared with (staff): the reference (once a
    review has run) and the public kernels staff added."""
    return SimilaritySourceList(sources=[source_read(s) for s in
                                         similarity.sources(session, assignment=name)])


@router.post("/{name}/similarity/sources", status_code=status.HTTP_201_CREATED,
             response_model=SimilaritySourceRead,
             responses={**_UNKNOWN, 409: {"model": ErrorResponse,
                                          "description": "similarity_source_name_taken"}})
def add_similarity_source(name: AssignmentName, body: SimilaritySourceCreate,
                          principal: StaffOnly, session: SessionDep,
                          now: NowDep) -> SimilaritySourceRead:
    """Add a known public kernel (a library's, a tutorial's) to compare every submission
    with from the next review on (staff; audited). 422 similarity_source_invalid when the
    text is not Python."""
    source = similarity.add_source(session, assignment=name, name=body.name, origin=body.origin,
                                   text=body.text, actor=principal.actor, now=now)
    return source_read(source)


@router.delete("/{name}/similarity/sources/{source_id}", status_code=status.HTTP_204_NO_CONTENT,
               responses={**_UNKNOWN, 404: {"model": ErrorResponse,
                                            "description": "similarity_source_not_found"}})
def remove_similarity_source(name: AssignmentName, source_id: SourceId, principal: StaffOnly,
                             session: SessionDep, now: NowDep) -> Response:
    """Remove a public source and its pairs (staff; audited)."""
    similarity.remove_source(session, assignment=name, source_id=source_id,
                             actor=principal.actor, now=now)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
