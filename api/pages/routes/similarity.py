"""The similarity review pages (staff): per assignment, the latest review's pairs at or
above a threshold, a review started from a form (a worker runs it), each pair's two texts
side by side with the matched fragments marked (escaped: they are students' texts), the
review mark, the CSV export and the known public sources. The same service functions as
``/api/v1/assignments/{name}/similarity`` (api/routes/similarity.py). Disqualifying stays on
the submission's own page: this page links there and decides nothing."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response

from api.deps import NowDep, SessionDep
from api.pages.rendering import PageRoute, redirect, render
from api.pages.routes.staff import validated
from api.pages.security import CheckedForm, StaffViewer
from api.routes.similarity import pair_read, run_read, source_read
from api.schemas import MAX_DB_INT, SimilarityReview, SimilarityRunCreate, SimilaritySourceCreate
from grader.manifest import MANIFESTS
from submissions import assignments, similarity
from submissions.errors import DomainError

router = APIRouter(route_class=PageRoute, include_in_schema=False, tags=["pages"])

Name = Annotated[str, Path(max_length=100)]
PairId = Annotated[int, Path(ge=1, le=MAX_DB_INT)]
SourceId = Annotated[int, Path(ge=1, le=MAX_DB_INT)]


@router.get("/staff/similarity")
def read_similarity(request: Request, viewer: StaffViewer, session: SessionDep,
                    assignment: Annotated[str | None, Query(max_length=100)] = None,
                    min_similarity: Annotated[float | None, Query(ge=0, le=1)] = None,
                    done: Annotated[str | None, Query(max_length=40)] = None) -> Response:
    """One assignment's review: the run under way, the pairs, the sources, the forms."""
    return _overview_page(request, viewer, session, assignment=assignment or next(iter(MANIFESTS)),
                          min_similarity=min_similarity, done=done)


def _overview_page(request: Request, viewer: object, session: object, *, assignment: str,
                   min_similarity: float | None, done: str | None,
                   error: DomainError | None = None, form: dict | None = None) -> Response:
    view = similarity.overview(session, assignment=assignment, min_similarity=min_similarity)
    return render(request, "similarity.html", viewer=viewer,
                  status_code=error.http_status if error else 200,
                  assignment=view.assignment, assignment_names=list(MANIFESTS),
                  run=run_read(view.run), pending=run_read(view.pending),
                  pairs=[pair_read(p) for p in view.pairs], min_similarity=view.min_similarity,
                  total=view.total,
                  sources=[source_read(s) for s in view.sources], done=done, error=error,
                  form=form or {}, default_threshold=similarity.DEFAULT_THRESHOLD)


@router.post("/staff/similarity/{name}/runs")
def start_review(name: Name, viewer: StaffViewer, checked: CheckedForm, session: SessionDep,
                 now: NowDep) -> Response:
    """Queue a review (similarity.request_run, audited)."""
    _, form = checked
    text = form.first("threshold").strip()
    body = validated(SimilarityRunCreate, {"threshold": text or None})
    similarity.request_run(session, assignment=name, threshold=body.threshold,
                           actor=viewer.principal.actor, now=now)
    return redirect(f"/staff/similarity?assignment={assignments.resolve_manifest(name).name}"
                    "&done=queued")


@router.get("/staff/similarity/{name}/pairs/{pair_id}")
def read_pair(request: Request, name: Name, pair_id: PairId, viewer: StaffViewer,
              session: SessionDep, done: Annotated[str | None, Query(max_length=40)] = None
              ) -> Response:
    """The two texts side by side, matched fragments marked; the review form."""
    pair = similarity.get_pair(session, assignment=name, pair_id=pair_id)
    read = pair_read(pair, with_text=True)
    sides = [(read.left, similarity.segments(read.left.text or "", read.left.fragments)),
             (read.right, similarity.segments(read.right.text or "", read.right.fragments))]
    return render(request, "similarity_pair.html", viewer=viewer, assignment=pair.left.assignment,
                  pair=read, sides=sides, done=done)


@router.post("/staff/similarity/{name}/pairs/{pair_id}/review")
def review_pair(name: Name, pair_id: PairId, viewer: StaffViewer, checked: CheckedForm,
                session: SessionDep, now: NowDep) -> Response:
    """Mark the pair reviewed with the note, or clear the mark (audited)."""
    _, form = checked
    reviewed = form.first("reviewed") != "false"
    body = validated(SimilarityReview, {"reviewed": reviewed,
                                        "note": form.first("note").strip() or None})
    pair = similarity.review_pair(session, assignment=name, pair_id=pair_id,
                                  reviewed=body.reviewed, note=body.note,
                                  actor=viewer.principal.actor, now=now)
    return redirect(f"/staff/similarity/{pair.left.assignment}/pairs/{pair.id}"
                    f"?done={'reviewed' if reviewed else 'cleared'}")


@router.post("/staff/similarity/{name}/export")
def export_pairs(name: Name, viewer: StaffViewer, checked: CheckedForm, session: SessionDep,
                 now: NowDep) -> Response:
    """The pairs as CSV (similarity.csv_export; audited, hence a POST)."""
    _, form = checked
    text = form.first("min_similarity").strip()
    try:
        floor = float(text) if text else None
    except ValueError:
        floor = -1.0  # refused by the service with its message
    csv_text = similarity.csv_export(session, assignment=name, min_similarity=floor,
                                     actor=viewer.principal.actor, now=now)
    return Response(csv_text, media_type="text/csv; charset=utf-8", headers={
        "Content-Disposition": f'attachment; filename="similarity-{assignments.resolve_manifest(name).name}.csv"',
        "Cache-Control": "no-store"})


@router.post("/staff/similarity/{name}/sources")
def add_source(request: Request, name: Name, viewer: StaffViewer, checked: CheckedForm,
               session: SessionDep, now: NowDep) -> Response:
    """Add a known public kernel; a refused one shows the page again with why and the
    text kept."""
    _, form = checked
    sent = {"name": form.first("name"), "origin": form.first("origin").strip() or None,
            "text": form.first("text")}
    try:
        body = validated(SimilaritySourceCreate, sent)
        similarity.add_source(session, assignment=name, name=body.name, origin=body.origin,
                              text=body.text, actor=viewer.principal.actor, now=now)
    except DomainError as exc:
        session.rollback()
        return _overview_page(request, viewer, session, assignment=name, min_similarity=None,
                              done=None, error=exc, form=sent)
    return redirect(f"/staff/similarity?assignment={assignments.resolve_manifest(name).name}"
                    "&done=source_added")


@router.post("/staff/similarity/{name}/sources/{source_id}/delete")
def remove_source(name: Name, source_id: SourceId, viewer: StaffViewer, checked: CheckedForm,
                  session: SessionDep, now: NowDep) -> Response:
    """Remove a public source and its pairs (audited)."""
    similarity.remove_source(session, assignment=name, source_id=source_id,
                             actor=viewer.principal.actor, now=now)
    return redirect(f"/staff/similarity?assignment={assignments.resolve_manifest(name).name}"
                    "&done=source_removed")
