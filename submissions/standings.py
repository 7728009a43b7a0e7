"""Standings: the leaderboard and each student's grade, computed from stored gradings
under today's rules (submissions/grades.py: the points policy, the due dates in force).

Two phases per assignment:

- ``provisional`` (no final run yet): each student's best passing, on-time, not
  disqualified submission, ranked by its current grading's headline speedup (higher
  first). Equal headlines share a rank, and so do passes without a GPU benchmark (after
  every benchmarked one): on a deployment without a GPU every pass ranks 1st. The order
  within a tie (earlier upload first) is for display only.
- ``final`` (a final ranking run has finished; the newest finished one decides): the same
  submissions re-graded on the run's secret seed, ranked by that run's headline (ties as
  above). A submission that failed there is listed without a rank and with the reason. A
  run still grading decides nothing yet: the board stays as it was (provisional, or the
  previous finished run's) and carries the run's progress (`Board.running`, graded N of M).

Every enrolled student has a row; those without a rank say why: ``late``, ``disqualified``,
no passing submission, no submission, the final run's reason, or a timing taken on another GPU
model than the one the board ranks (``board_gpu``: the model most rows were timed on). Grades
(submissions/scoring.py): correctness from the submission's current grading, speed from
the ranked number; late and disqualified work is graded 0 with what it earned beside it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from sqlalchemy.orm import Session

from submissions import grades, repository
from submissions.models import (
    INFRASTRUCTURE_ERROR,
    TERMINAL_STATUSES,
    Assignment,
    FinalRun,
    Grading,
    SubmissionStatus,
)
from submissions.repository import SubmissionVerdict
from submissions.scoring import Grade

#: Which board it is: before the final run (provisional: each student's best so far) or its outcome.
Phase = Literal["provisional", "final"]
PROVISIONAL: Phase = "provisional"
FINAL: Phase = "final"


#: ``status`` of a standing.
RANKED, UNRANKED, NO_PASSING_SUBMISSION, NO_SUBMISSION = (
    "ranked", "unranked", "no_passing_submission", "no_submission")


@dataclass(frozen=True)
class Standing:
    """One student on the board.

    Attributes:
        rank: 1-based (tied entries share one), or None (see `reason`).
        status: RANKED, UNRANKED (a passing submission that does not rank: late,
            disqualified, or the final run's reason), NO_PASSING_SUBMISSION, NO_SUBMISSION.
        submission_id: the submission the row is about (the ranked one; else the best
            passing one, else the latest); None without a submission.
        headline_speedup: the ranked number (the final run's in the final phase).
        grading_id: the grading that gives the ranked number.
        reason: why there is no rank (None when ranked).
        grade: the student's grade (submissions/scoring.py): that of the submission that
            counts (`graded_submission_id`: best or latest, the assignment's choice); None:
            nothing graded.
        counts: the student's submissions of the assignment (all, late now, disqualified).
        graded_submission_id: the submission the grade comes from (None: no submission).
    """

    rank: int | None
    status: str
    student_id: int
    student_name: str
    submission_id: int | None
    grading_id: int | None
    headline_speedup: float | None
    device: str | None
    submitted_at: dt.datetime | None
    reason: str | None
    grade: Grade | None
    counts: SubmissionCounts
    graded_submission_id: int | None = None


@dataclass(frozen=True)
class SubmissionCounts:
    """How many submissions of the assignment a student has, late (now) and disqualified."""

    total: int = 0
    late: int = 0
    disqualified: int = 0


@dataclass(frozen=True)
class RunProgress:
    """A final run under way: `graded` of its `total` gradings have a verdict."""

    run: FinalRun
    graded: int
    total: int


def run_progress(run: FinalRun, gradings: Sequence[Grading]) -> RunProgress:
    """How far `run` is (a grading counts once it reached a terminal status)."""
    return RunProgress(run=run, total=len(gradings),
                       graded=sum(g.status in TERMINAL_STATUSES for g in gradings))


@dataclass(frozen=True)
class Board:
    """The standings of one assignment: ranked rows (best first), then unranked ones."""

    assignment: Assignment
    rules: grades.AssignmentRules
    phase: Phase
    final_run: FinalRun | None
    standings: list[Standing]
    #: A final run still grading (it decides once finished; until then the board is the
    #: previous finished run's, or provisional), with how many of its gradings are done.
    running: RunProgress | None = None

    def of_student(self, student_id: int) -> Standing | None:
        """The student's row, or None."""
        return next((s for s in self.standings if s.student_id == student_id), None)


def final_run_reason(grading: Grading) -> str | None:
    """Why a final-run grading gives no rank (None: it passed)."""
    if grading.status not in TERMINAL_STATUSES:
        return "pending: the final ranking run has not graded this submission yet"
    if grading.status == SubmissionStatus.PASSED:
        return None
    if grading.error_kind == INFRASTRUCTURE_ERROR:
        return ("the final ranking run broke on our side (infrastructure error); staff can "
                "start a new final run")
    if grading.status == SubmissionStatus.FAILED:
        return f"failed in the final ranking run: {grading.error_message or 'a check failed'}"
    return (f"error in the final ranking run ({grading.error_kind}): "
            f"{grading.error_message or ''}").rstrip(": ")


def _best_first(verdict: SubmissionVerdict) -> tuple:
    return (verdict.headline_speedup is None, -(verdict.headline_speedup or 0.0),
            verdict.submitted_at, verdict.submission_id)


def _passed(verdict: SubmissionVerdict) -> bool:
    return verdict.status == SubmissionStatus.PASSED


@dataclass(frozen=True)
class _Student:
    """One student's submissions sorted into what ranks and what does not."""

    eligible: SubmissionVerdict | None  # best passing, on time, not disqualified
    fallback: SubmissionVerdict | None  # the submission an unranked row is about
    reason: str | None
    status: str
    counts: SubmissionCounts


def _sort_student(rules: grades.AssignmentRules, student_id: int,
                  verdicts: list[SubmissionVerdict]) -> _Student:
    def late(v: SubmissionVerdict) -> bool:
        return rules.verdict_late(v)

    counts = SubmissionCounts(total=len(verdicts), late=sum(1 for v in verdicts if late(v)),
                              disqualified=sum(1 for v in verdicts if v.disqualified))
    passing = sorted((v for v in verdicts if _passed(v)), key=_best_first)
    eligible = [v for v in passing if not v.disqualified and not late(v)]
    if eligible:
        return _Student(eligible[0], eligible[0], None, RANKED, counts)
    if not verdicts:
        return _Student(None, None, "no submission", NO_SUBMISSION, counts)
    undisqualified = [v for v in passing if not v.disqualified]
    if undisqualified:
        due = rules.due_for(student_id)
        return _Student(None, undisqualified[0],
                        f"late: every passing submission was uploaded after the due date "
                        f"in force ({due.isoformat() if due else 'none'})", UNRANKED, counts)
    if passing:
        return _Student(None, passing[0], "disqualified: "
                        + (passing[0].disqualified_reason or "by staff"), UNRANKED, counts)
    return _Student(None, verdicts[-1], "no passing submission", NO_PASSING_SUBMISSION, counts)


def _tied_ranks(keys: list[tuple]) -> list[int]:
    """Competition ranks ("1, 1, 3") of `keys` sorted best first: equal keys share a rank."""
    ranks: list[int] = []
    for position, key in enumerate(keys, start=1):
        ranks.append(ranks[-1] if ranks and key == keys[position - 2] else position)
    return ranks


def _unranked(student: _Student, student_name: str, student_id: int,
              rules: grades.AssignmentRules, *, reason: str | None = None,
              status: str | None = None, verdict: SubmissionVerdict | None = None,
              grade: Grade | None = None, grading_id: int | None = None) -> Standing:
    verdict = verdict or student.fallback
    return Standing(
        rank=None, status=status or student.status, student_id=student_id,
        student_name=student_name,
        submission_id=verdict.submission_id if verdict else None,
        grading_id=grading_id or (verdict.grading_id if verdict else None),
        headline_speedup=None, device=verdict.device if verdict else None,
        submitted_at=verdict.submitted_at if verdict else None,
        reason=reason or student.reason,
        grade=grade if grade is not None else
        (rules.grade_of_verdict(verdict) if verdict else None),
        counts=student.counts)


def board_gpu(rows: list[tuple[tuple, Standing]]) -> str | None:
    """The GPU model whose timings a board ranks: the device of most benchmarked rows (ties:
    the first by name), or None when no row has a headline. Speedups are ratios to a baseline
    timed on the same GPU, but the ratio itself depends on the model (bandwidth, clocks,
    caches), so a board ranks one model's timings only."""
    counts: dict[str, int] = {}
    for _key, standing in rows:
        if standing.headline_speedup is not None and standing.device:
            counts[standing.device] = counts.get(standing.device, 0) + 1
    return min(counts, key=lambda device: (-counts[device], device)) if counts else None


def _on_one_gpu(rows: list[tuple[tuple, Standing]]) -> tuple[list[tuple[tuple, Standing]], list[Standing]]:
    """``rows`` split into those ranked on the board's GPU model (``board_gpu``; rows without
    a headline stay) and those timed on another model, unranked with the reason."""
    gpu = board_gpu(rows)
    kept: list[tuple[tuple, Standing]] = []
    moved: list[Standing] = []
    for key, standing in rows:
        if standing.headline_speedup is not None and gpu is not None and standing.device != gpu:
            moved.append(Standing(**{**standing.__dict__, "rank": None, "status": UNRANKED,
                                     "reason": f"timed on {standing.device}; this board ranks timings on {gpu} "
                                               "only (speedups on different GPU models are not comparable)"}))
        else:
            kept.append((key, standing))
    return kept, moved


def _ranked(rows: list[tuple[tuple, Standing]]) -> list[Standing]:
    rows.sort(key=lambda pair: pair[0])
    ranks = _tied_ranks([key[:2] for key, _ in rows])
    return [Standing(**{**s.__dict__, "rank": rank}) for rank, (_key, s) in zip(ranks, rows)]


def board(session: Session, *, assignment: str, now: dt.datetime) -> Board:
    """The leaderboard of `assignment` with a row for every enrolled student (see the
    module docstring).

    Raises:
        UnknownAssignment: not in the manifest.
    """
    rules = grades.rules(session, assignment=assignment, now=now)
    row = rules.assignment
    by_student: dict[int, list[SubmissionVerdict]] = {}
    verdicts = repository.assignment_verdicts(session, assignment=row.name)
    for verdict in verdicts:
        by_student.setdefault(verdict.student_id, []).append(verdict)
    students = {s.id: s.name for s in repository.list_students(session)}
    sorted_students = {sid: _sort_student(rules, sid, by_student.get(sid, []))
                       for sid in students}
    # The newest finished final run decides; one still grading is shown as progress only,
    # so the board never says "final" over rows that are all pending (issue 38).
    run: FinalRun | None = None
    run_gradings: Sequence[Grading] = ()
    running: RunProgress | None = None
    for candidate in repository.list_final_runs(session, assignment=row.name):
        gradings = repository.final_run_gradings(session, final_run_id=candidate.id)
        progress = run_progress(candidate, gradings)
        if progress.graded == progress.total:
            run, run_gradings = candidate, gradings
            break
        running = running or progress
    ranked: list[tuple[tuple, Standing]] = []
    unranked: list[Standing] = []
    if run is None:
        for sid, student in sorted_students.items():
            best = student.eligible
            if best is None:
                unranked.append(_unranked(student, students[sid], sid, rules))
                continue
            ranked.append((_best_first(best), Standing(
                rank=None, status=RANKED, student_id=sid, student_name=students[sid],
                submission_id=best.submission_id, grading_id=best.grading_id,
                headline_speedup=best.headline_speedup, device=best.device,
                submitted_at=best.submitted_at, reason=None,
                grade=rules.grade_of_verdict(best), counts=student.counts)))
        ranked, other_gpus = _on_one_gpu(ranked)
        return Board(assignment=row, rules=rules, phase=PROVISIONAL, final_run=None,
                     standings=_counted(rules, by_student, _ranked(ranked)
                                        + _unranked_order(unranked + other_gpus)),
                     running=running)

    by_submission = {v.submission_id: v for v in verdicts}
    in_run: set[int] = set()
    for grading in run_gradings:
        found = by_submission.get(grading.submission_id)
        if found is None:
            continue
        verdict = found
        sid = verdict.student_id
        in_run.add(sid)
        student = sorted_students[sid]
        currently_passing = _passed(verdict)
        reason = final_run_reason(grading)
        ranked_headline = grading.headline_speedup if reason is None else None
        if verdict.disqualified:
            reason = "disqualified: " + (verdict.disqualified_reason or "by staff")
        elif rules.verdict_late(verdict):
            reason = student.reason if student.eligible is None else (
                "late under today's due date; a new final run ranks the on-time submission")
        if reason is not None:
            unranked.append(_unranked(
                student, students[sid], sid, rules, reason=reason, status=UNRANKED,
                verdict=verdict, grading_id=grading.id,
                grade=rules.grade_of_verdict(verdict, passed=currently_passing,
                                             headline=ranked_headline)))
            continue
        key = (grading.headline_speedup is None, -(grading.headline_speedup or 0.0),
               verdict.submitted_at, verdict.submission_id)
        ranked.append((key, Standing(
            rank=None, status=RANKED, student_id=sid, student_name=students[sid],
            submission_id=verdict.submission_id, grading_id=grading.id,
            headline_speedup=grading.headline_speedup, device=grading.device,
            submitted_at=verdict.submitted_at, reason=None,
            grade=rules.grade_of_verdict(verdict, passed=currently_passing,
                                         headline=grading.headline_speedup),
            counts=student.counts)))
    for sid, student in sorted_students.items():
        if sid in in_run:
            continue
        if student.eligible is not None:
            unranked.append(_unranked(
                student, students[sid], sid, rules, status=UNRANKED,
                reason="not in the final ranking run (a later change; start a new final run "
                       "to rank it)",
                grade=rules.grade_of_verdict(student.eligible, passed=True, headline=None)))
        else:
            unranked.append(_unranked(student, students[sid], sid, rules))
    ranked, other_gpus = _on_one_gpu(ranked)
    return Board(assignment=row, rules=rules, phase=FINAL, final_run=run,
                 standings=_counted(rules, by_student, _ranked(ranked)
                                    + _unranked_order(unranked + other_gpus), final=True),
                 running=running)


def _counted(rules: grades.AssignmentRules, by_student: dict[int, list[SubmissionVerdict]],
             rows: list[Standing], *, final: bool = False) -> list[Standing]:
    """Each row with the grade of the student's submission that counts (best or latest:
    grades.AssignmentRules.choose_counted). The row's own submission keeps the grade the
    board gave it (a final run's speed points); the others are graded by their current
    grading, without speed points once a final run decides them (`final`)."""
    counted_rows = []
    for standing in rows:
        verdicts = by_student.get(standing.student_id, [])

        def grade_for(verdict: SubmissionVerdict, standing: Standing = standing) -> Grade | None:
            if verdict.submission_id == standing.submission_id and standing.grade is not None:
                return standing.grade
            if final and verdict.status in TERMINAL_STATUSES:
                return rules.grade_of_verdict(verdict, passed=_passed(verdict), headline=None)
            return rules.grade_of_verdict(verdict)

        chosen = rules.choose_counted(verdicts, grade_for, prefer=standing.submission_id)
        if chosen is None:
            counted_rows.append(standing)
            continue
        counted_rows.append(Standing(**{**standing.__dict__, "grade": grade_for(chosen),
                                        "graded_submission_id": chosen.submission_id}))
    return counted_rows


def counted_submissions(session: Session, *, assignment: str, now: dt.datetime) -> dict[int, int]:
    """Each student's submission that counts for their grade, by student id: the board's
    `Standing.graded_submission_id` (what the gradebook, the leaderboard and the exports
    name; grades.AssignmentRules.choose_counted). A student with nothing counted yet (no
    upload; or, counting ``best``, none graded yet) is left out. The similarity review
    compares these (submissions/similarity.py).

    Raises:
        UnknownAssignment: not in the manifest.
    """
    return {s.student_id: s.graded_submission_id
            for s in board(session, assignment=assignment, now=now).standings
            if s.graded_submission_id is not None}


def _unranked_order(rows: list[Standing]) -> list[Standing]:
    """Unranked rows: those with a submission first (by upload), then by student id."""
    return sorted(rows, key=lambda s: (s.submitted_at is None,
                                       s.submitted_at or dt.datetime.min.replace(tzinfo=dt.UTC),
                                       s.student_id))


def rankable_submissions(session: Session, *, assignment: str,
                         now: dt.datetime) -> tuple[grades.AssignmentRules, list[SubmissionVerdict]]:
    """Each student's best passing, on-time, not disqualified submission (what the
    provisional board ranks and a final run re-grades), best first, with the rules used.

    Raises:
        UnknownAssignment: not in the manifest.
    """
    rules = grades.rules(session, assignment=assignment, now=now)
    by_student: dict[int, list[SubmissionVerdict]] = {}
    for verdict in repository.assignment_verdicts(session, assignment=rules.assignment.name):
        by_student.setdefault(verdict.student_id, []).append(verdict)
    best = [_sort_student(rules, sid, verdicts).eligible for sid, verdicts in by_student.items()]
    return rules, sorted((v for v in best if v is not None), key=_best_first)
