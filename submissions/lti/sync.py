"""The roster sync (NRPS) and the score sync (AGS), run on demand (`grader lti sync`,
``POST /api/v1/lti/sync``, the ``/lti`` page) and on a schedule (`LtiSyncLoop` in
`grader serve`, every ``lti_sync_interval_s``, in the one API process that holds the
``lti_sync`` lease in the database, however many processes and hosts run the API).

Transactions: each step is its own short transaction from `session_factory`; none is open
while the service waits on an LMS.

Roster (`sync_roster`): every member the context's NRPS endpoint lists with a role the
grader knows is provisioned by ``sub`` (submissions/lti/people.py) and marked active; one
listed as Inactive or Deleted, or no longer listed, is marked dropped (their account and
submissions stay). What changed (added, rejoined, dropped, how many kept) is stored on the
context and shown on the roster page.

Scores (`reconcile_scores`, then `push_due_scores`): for each assignment a context links to
and each student with a grade (the board's grade: submissions/standings.py and
submissions/scoring.py, the number every page, command and export shows), the student's
sync row holds the score to send. A new or changed grade (a grading, an applied regrade, a
moved due date or extension, a disqualification, a final ranking run: whatever changes the
board's grade) makes the row ``pending``; a student the LMS never listed or launched is
``no_identity``. Each due row is pushed on its own: success -> ``synced``; failure ->
``failed`` with the reason, retried after a backoff doubling from ``lti_retry_first_s`` to
``lti_retry_max_s``. One student's failure never stops another's push. The line item of an
assignment is found (by ``resourceId`` = the assignment, tag ``kernel-grader``) before it is
ever created, and remembered: retries and restarts never make a second one.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import secrets
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from grader.manifest import MANIFESTS
from submissions import audit, repository, standings
from submissions.lti import keys, people
from submissions.lti.errors import LtiPlatformError, LtiSyncRunning
from submissions.lti.platform import SCOPE_LINEITEM, PlatformClient
from submissions.models import LtiLineItem, LtiScoreState, LtiScoreSync, utc_now
from submissions.settings import Settings

logger = logging.getLogger("submissions.lti")

SessionFactory = Callable[[], Session]
#: One push run at a time in a process (two would find-or-create the same line item).
_push_lock = threading.Lock()


def _client(session: Session, *, registration_id: int, settings: Settings,
            now: dt.datetime) -> PlatformClient:
    registration = repository.get_lti_registration(session, registration_id=registration_id)
    assert registration is not None  # noqa: S101 - contexts cascade with their registration
    key = keys.signing_key(session, settings=settings, now=now)
    session.expunge(registration)
    return PlatformClient(registration=registration, key=key, timeout_s=settings.lti_http_timeout_s)


# ------------------------------------------------------------------------------ roster


@dataclass
class RosterChanges:
    """What one roster sync changed (names as the grader shows them)."""

    added: list[str] = field(default_factory=list)
    rejoined: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    kept: int = 0

    def as_dict(self) -> dict[str, object]:
        return {"added": self.added, "rejoined": self.rejoined, "dropped": self.dropped,
                "kept": self.kept}


def _account_name(session: Session, identity_student_id: int | None, fallback: str) -> str:
    if identity_student_id is not None:
        student = repository.get_student(session, student_id=identity_student_id)
        if student is not None:
            return student.name
    return fallback


def sync_roster(session_factory: SessionFactory, *, context_row_id: int, settings: Settings,
                now: dt.datetime) -> RosterChanges:
    """Sync one context's roster from its NRPS endpoint (module docstring).

    Raises:
        LtiPlatformError: the roster could not be read (also stored on the context).
    """
    with session_factory() as session:
        context = repository.get_lti_context(session, context_row_id=context_row_id)
        if context is None or not context.memberships_url:
            raise LtiPlatformError("this LMS course gave no roster endpoint (NRPS) in its launches")
        url, registration_id = context.memberships_url, context.registration_id
        client = _client(session, registration_id=registration_id, settings=settings, now=now)
        session.commit()
    try:
        members = client.memberships(url)
    except LtiPlatformError as exc:
        with session_factory() as session:
            context = repository.get_lti_context(session, context_row_id=context_row_id)
            if context is not None:
                context.roster_error = str(exc)
            session.commit()
        raise
    changes = RosterChanges()
    with session_factory() as session:
        context = repository.get_lti_context(session, context_row_id=context_row_id)
        registration = repository.get_lti_registration(session, registration_id=registration_id)
        assert context is not None and registration is not None  # noqa: S101 - read above
        listed: set[str] = set()
        for member in members:
            sub, role = str(member.get("user_id") or ""), people.role_of(member.get("roles") or [])
            if not sub or role is None:
                continue
            status = str(member.get("status") or "Active")
            identity = repository.find_lti_identity(session, registration_id=registration_id,
                                                    sub=sub)
            if status != "Active":
                if identity is None:
                    continue
                listed.add(sub)
                _membership, previous = people.set_membership(
                    session, context=context, identity=identity, role=role,
                    status=people.DROPPED, now=now)
                if previous == people.ACTIVE and role == people.STUDENT:
                    changes.dropped.append(_account_name(session, identity.student_id, sub))
                continue
            listed.add(sub)
            identity, _created = people.provision(
                session, registration=registration, sub=sub, role=role,
                name=member.get("name") or " ".join(filter(None, [
                    member.get("given_name"), member.get("family_name")])) or None,
                email=member.get("email"), now=now)
            _membership, previous = people.set_membership(
                session, context=context, identity=identity, role=role, status=people.ACTIVE,
                now=now)
            if role != people.STUDENT:
                continue
            name = _account_name(session, identity.student_id, sub)
            if previous is None:
                changes.added.append(name)
            elif previous == people.DROPPED:
                changes.rejoined.append(name)
            else:
                changes.kept += 1
        for membership, identity in repository.list_lti_memberships(session,
                                                                    context_row_id=context.id):
            if identity.sub in listed or membership.status == people.DROPPED:
                continue
            people.set_membership(session, context=context, identity=identity,
                                  role=membership.role, status=people.DROPPED, now=now)
            if membership.role == people.STUDENT:
                changes.dropped.append(_account_name(session, identity.student_id, identity.sub))
        context.roster_synced_at, context.roster_error = now, None
        context.roster_changes = changes.as_dict()
        audit.record(session, actor=people.lti_actor(registration), action="lti.roster_sync",
                     now=now, target_type="lti_context", target_id=context.id,
                     details=changes.as_dict())
        session.commit()
    return changes


# ------------------------------------------------------------------------------ scores


def reconcile_scores(session: Session, *, now: dt.datetime) -> int:
    """Bring every sync row in line with the board's grades (module docstring); flushes.
    Returns how many rows became pending."""
    made_pending = 0
    identities = repository.lti_identities_of_students(session)
    students = repository.list_students(session)
    for context in repository.list_lti_contexts(session):
        assignments = [a for a in repository.lti_linked_assignments(
            session, context_row_id=context.id) if a in MANIFESTS]
        if not assignments:
            continue
        members = {identity.student_id: membership for membership, identity in
                   repository.list_lti_memberships(session, context_row_id=context.id)
                   if identity.student_id is not None}
        for assignment in assignments:
            board = standings.board(session, assignment=assignment, now=now)
            for student in students:
                standing = board.of_student(student.id)
                grade = None if standing is None else standing.grade
                if grade is None:
                    continue
                membership = members.get(student.id)
                if membership is None and student.id in identities:
                    continue  # another course's student (the LMS knows them elsewhere)
                if membership is not None and membership.status == people.DROPPED:
                    continue  # dropped: the LMS no longer takes their scores
                given, maximum = grade.total, grade.max_total
                state = LtiScoreState.NO_IDENTITY if membership is None else None
                row = repository.get_lti_score_sync(session, context_row_id=context.id,
                                                    assignment=assignment, student_id=student.id)
                if row is None:
                    row, _ = repository.insert_or_get(
                        session, LtiScoreSync(
                            context_row_id=context.id, assignment=assignment,
                            student_id=student.id, state=state or LtiScoreState.PENDING,
                            score_given=given, score_maximum=maximum, attempts=0,
                            next_attempt_at=now, updated_at=now),
                        lambda c=context.id, s=student.id, a=assignment:
                            repository.get_lti_score_sync(session, context_row_id=c,
                                                          assignment=a, student_id=s))
                    made_pending += row.state == LtiScoreState.PENDING
                    continue
                if state is not None:
                    if row.state != state or row.score_given != given:
                        row.state, row.score_given, row.score_maximum = state, given, maximum
                        row.updated_at = now
                    continue
                unchanged = row.score_given == given and row.score_maximum == maximum
                if unchanged and row.state in (LtiScoreState.SYNCED, LtiScoreState.FAILED,
                                               LtiScoreState.PENDING):
                    continue
                row.state, row.score_given, row.score_maximum = (LtiScoreState.PENDING, given,
                                                                 maximum)
                row.next_attempt_at, row.updated_at = now, now
                made_pending += 1
    session.flush()
    return made_pending


@dataclass
class PushReport:
    """One push run: how many scores were sent and how many failed (with why)."""

    sent: int = 0
    failed: dict[int, str] = field(default_factory=dict)  # sync row id -> reason


def _line_item(session_factory: SessionFactory, client: PlatformClient, *, context_row_id: int,
               assignment: str, maximum: float, now: dt.datetime) -> str:
    """The line item URL of `assignment` in the context: remembered, or the one a link
    carries, or found on the platform by resourceId, or created there (once)."""
    with session_factory() as session:
        known = repository.get_lti_line_item(session, context_row_id=context_row_id,
                                             assignment=assignment)
        if known is not None:
            return known.lineitem_url
        context = repository.get_lti_context(session, context_row_id=context_row_id)
        assert context is not None  # noqa: S101 - the row being pushed belongs to it
        lineitems_url, scopes = context.lineitems_url, set(context.ags_scopes or [])
        from_link = repository.lti_resource_link_line_item(
            session, context_row_id=context_row_id, assignment=assignment)
    if lineitems_url is None or (SCOPE_LINEITEM not in scopes and from_link is not None):
        if from_link is not None:
            return from_link
        raise LtiPlatformError(
            "the LMS gave no line items endpoint for this course (in Moodle, the tool's "
            "'grade sync only' mode withholds it: choose 'use this service for grade sync and "
            "column management')")
    url = client.find_line_item(lineitems_url, resource_id=assignment)
    if url is None:
        manifest = MANIFESTS[assignment]
        url = client.create_line_item(lineitems_url, resource_id=assignment,
                                      label=manifest.title[:200], score_maximum=maximum)
    with session_factory() as session:
        row, _ = repository.insert_or_get(
            session, LtiLineItem(context_row_id=context_row_id, assignment=assignment,
                                 lineitem_url=url, created_at=now),
            lambda: repository.get_lti_line_item(session, context_row_id=context_row_id,
                                                 assignment=assignment))
        url = row.lineitem_url
        session.commit()
    return url


def _backoff_s(settings: Settings, attempts: int) -> float:
    return min(settings.lti_retry_max_s, settings.lti_retry_first_s * 2 ** max(0, attempts - 1))


def push_due_scores(session_factory: SessionFactory, *, settings: Settings,
                    now: dt.datetime) -> PushReport:
    """Push every due score (module docstring); each row in its own transactions."""
    report = PushReport()
    with _push_lock:
        with session_factory() as session:
            due = [(r.id, r.context_row_id, r.assignment, r.student_id, r.score_given,
                    r.score_maximum) for r in repository.list_due_lti_score_syncs(session, now=now)]
            session.commit()
        clients: dict[int, PlatformClient] = {}
        for row_id, context_row_id, assignment, student_id, given, maximum in due:
            try:
                with session_factory() as session:
                    context = repository.get_lti_context(session, context_row_id=context_row_id)
                    identity = next((i for m, i in repository.list_lti_memberships(
                        session, context_row_id=context_row_id)
                        if i.student_id == student_id), None)
                    if context is None or identity is None or given is None or maximum is None:
                        continue
                    sub = identity.sub
                    if context_row_id not in clients:
                        clients[context_row_id] = _client(
                            session, registration_id=context.registration_id, settings=settings,
                            now=now)
                    session.commit()
                client = clients[context_row_id]
                url = _line_item(session_factory, client, context_row_id=context_row_id,
                                 assignment=assignment, maximum=maximum, now=now)
                client.post_score(url, user_id=sub, score_given=given, score_maximum=maximum,
                                  timestamp=utc_now().isoformat().replace("+00:00", "Z"))
            except LtiPlatformError as exc:
                reason = str(exc)[:2000]
                report.failed[row_id] = reason
                with session_factory() as session:
                    row = session.get(LtiScoreSync, row_id)
                    if row is not None:
                        row.attempts += 1
                        row.state, row.last_error, row.updated_at = (LtiScoreState.FAILED,
                                                                     reason, now)
                        row.next_attempt_at = now + dt.timedelta(
                            seconds=_backoff_s(settings, row.attempts))
                    session.commit()
                logger.warning("LMS score push %s failed: %s", row_id, reason)
                continue
            report.sent += 1
            with session_factory() as session:
                row = session.get(LtiScoreSync, row_id)
                if row is not None:
                    row.attempts += 1
                    row.synced_score, row.synced_at, row.last_error = given, now, None
                    row.updated_at = now
                    # A grade that changed while this push was under way stays pending.
                    if row.score_given == given and row.score_maximum == maximum:
                        row.state, row.next_attempt_at = LtiScoreState.SYNCED, None
                session.commit()
    return report


# ------------------------------------------------------------------------------- runs


@dataclass
class SyncRun:
    """What one run did: roster changes by context id, roster failures, the push."""

    rosters: dict[int, RosterChanges] = field(default_factory=dict)
    roster_errors: dict[int, str] = field(default_factory=dict)
    made_pending: int = 0
    push: PushReport = field(default_factory=PushReport)


def run_sync(session_factory: SessionFactory, *, settings: Settings, now: dt.datetime,
             rosters: bool | None = None) -> SyncRun:
    """One sync: the rosters (all with `rosters`=True; None: those not synced for
    ``lti_roster_interval_s``), then the scores (reconcile, push)."""
    run = SyncRun()
    with session_factory() as session:
        interval = dt.timedelta(seconds=settings.lti_roster_interval_s)
        due = [c.id for c in repository.list_lti_contexts(session) if c.memberships_url and (
            rosters or (rosters is None and (c.roster_synced_at is None
                                             or c.roster_synced_at + interval <= now)))]
        session.commit()
    for context_row_id in due:
        try:
            run.rosters[context_row_id] = sync_roster(session_factory,
                                                      context_row_id=context_row_id,
                                                      settings=settings, now=now)
        except LtiPlatformError as exc:
            run.roster_errors[context_row_id] = str(exc)
    with session_factory() as session:
        run.made_pending = reconcile_scores(session, now=now)
        session.commit()
    run.push = push_due_scores(session_factory, settings=settings, now=now)
    return run


#: The lease a scheduled round needs (submissions/repository/leases.py).
SYNC_LEASE = "lti_sync"
#: The lease every run holds while it runs, scheduled or on demand: one run at a time across
#: processes and hosts, so that two never find-or-create the same line item at once.
RUN_LEASE = "lti_sync_run"
#: How long the run lease lasts unless renewed (seconds); a run renews it every third of
#: that, so a run whose process died frees it within this time.
RUN_LEASE_S = 120.0


def _take_lease(session_factory: SessionFactory, *, name: str, holder: str, ttl_s: float) -> bool | None:
    """Take or renew lease `name` for `holder` for `ttl_s` (one transaction). Returns whether
    `holder` holds it now, or None when the database could not be asked (logged; the caller
    decides what an outage means)."""
    try:
        with session_factory() as session:
            held = repository.take_lease(session, name=name, holder=holder, ttl_s=ttl_s, now=utc_now())
            session.commit()
    except Exception:  # noqa: BLE001 - a database outage
        logger.exception("LMS sync: the lease %r could not be taken or renewed", name)
        return None
    return held


def _release_lease(session_factory: SessionFactory, *, name: str, holder: str) -> None:
    """Release lease `name` if `holder` holds it; a failure is logged (the lease expires by itself)."""
    try:
        with session_factory() as session:
            repository.release_lease(session, name=name, holder=holder, now=utc_now())
            session.commit()
    except Exception:  # noqa: BLE001 - it expires by itself
        logger.exception("LMS sync: the lease %r could not be released", name)


def _renew(done: threading.Event, *, take: Callable[[], bool], period_s: float, holder: str, name: str) -> None:
    """Renew a lease every `period_s` (``take``) until `done` is set; stop, with a warning, once
    ``take`` says the lease was lost (another process holds it now)."""
    while not done.wait(period_s):
        if not take():
            logger.warning("LMS sync: %s lost the lease %r during a run", holder, name)
            return


@contextmanager
def _held(session_factory: SessionFactory, *, name: str, holder: str, ttl_s: float) -> Iterator[bool]:
    """Hold lease `name` for the block, renewed every ``ttl_s / 3`` in a thread and released
    at its end. Yields whether it was taken (False: another holds it; the block runs anyway,
    and decides)."""
    with session_factory() as session:
        taken = repository.take_lease(session, name=name, holder=holder, ttl_s=ttl_s, now=utc_now())
        session.commit()
    if not taken:
        yield False
        return
    def take() -> bool:  # a database outage is not a loss: the next renewal tries again
        return _take_lease(session_factory, name=name, holder=holder, ttl_s=ttl_s) is not False

    done = threading.Event()
    keeper = threading.Thread(target=_renew, args=(done,), kwargs=dict(take=take, period_s=ttl_s / 3, holder=holder,
                                                                      name=name), name=f"lease-{name}", daemon=True)
    keeper.start()
    try:
        yield True
    finally:
        done.set()
        keeper.join()
        _release_lease(session_factory, name=name, holder=holder)


def run_sync_exclusive(session_factory: SessionFactory, *, settings: Settings, now: dt.datetime,
                       rosters: bool | None = None, holder: str | None = None,
                       lease_s: float = RUN_LEASE_S) -> SyncRun:
    """`run_sync` while holding the ``lti_sync_run`` lease (`RUN_LEASE`): the only way the
    service runs a sync, scheduled (`LtiSyncLoop`) or on demand (``POST /api/v1/lti/sync``,
    the ``/lti`` page, `grader lti sync`), so two runs never overlap, in one process or many.

    Raises:
        LtiSyncRunning: another run holds the lease (the message says since when).
    """
    holder = holder or process_holder_id()
    with _held(session_factory, name=RUN_LEASE, holder=holder, ttl_s=lease_s) as taken:
        if not taken:
            with session_factory() as session:
                lease = repository.get_lease(session, name=RUN_LEASE)
                since = lease.acquired_at.strftime("%H:%M:%S UTC") if lease is not None else "a moment ago"
            raise LtiSyncRunning(f"a sync with the LMS is running now (since {since}); its results show on "
                                 "the LMS page when it ends: sync again after that if you still need to")
        return run_sync(session_factory, settings=settings, now=now, rosters=rosters)


def process_holder_id() -> str:
    """This process's name as a lease holder: its host, its pid and a random part (a pid
    is reused after a restart; the random part tells the new process from the old)."""
    return f"{socket.gethostname()[:150]}:{os.getpid()}:{secrets.token_hex(4)}"


class LtiSyncLoop:
    """The scheduled sync: every ``lti_sync_interval_s``, in a daemon thread of each API
    process (`grader serve`, each uvicorn worker, each replica on any host), one round
    (`run_sync`) in the one process that holds the ``lti_sync`` lease in the database.

    Without the lease N processes would sync every roster N times per interval and race on
    the pushes (two find-or-create the same line item; `_push_lock` is per process). With it:

    - each tick takes or renews the lease (`repository.take_lease`, atomic on SQLite and
      PostgreSQL); a process that does not get it skips the round. The holder keeps it from
      round to round: the lease lasts `lease_s` (twice the interval by default) and is
      renewed at each round's start and end, and every ``lease_s / 3`` while a round runs
      (a slow LMS cannot make it lapse mid-round);
    - a holder that dies (killed, host down) stops renewing: its lease expires and the first
      other process to tick after that takes it and runs the rounds from then on (so rounds
      pause for at most about ``lease_s`` + one interval: 15 min with the defaults);
    - `stop` releases the lease once no round is running, so another process takes over at
      its next tick instead of after the expiry.

    Every round also holds the run lease (`run_sync_exclusive`) that on-demand syncs take
    (``POST /api/v1/lti/sync``, the ``/lti`` page, `grader lti sync`): a round that finds one
    running waits for the next tick, and an on-demand sync that finds a round running is
    refused (409 ``lti_sync_running``), so two runs never overlap. A process cut off from the
    database for longer than a lease while it runs may still finish its run beside a new one;
    scores sent twice replace themselves.
    """

    def __init__(self, session_factory: SessionFactory, settings: Settings, *,
                 holder: str | None = None, lease_s: float | None = None) -> None:
        self.session_factory, self.settings = session_factory, settings
        self.interval_s = settings.lti_sync_interval_s or 300.0
        self.lease_s = lease_s if lease_s is not None else 2 * self.interval_s
        self.holder = holder or process_holder_id()
        self.rounds = 0  #: rounds this loop ran
        self._holding = False
        self._round_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lti-sync", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """Ask the loop to end and release the lease: at once when no round runs, else when
        the round under way ends (waited for up to `timeout_s`; a lease left held by a
        process that exits first expires by itself)."""
        self._stop.set()
        got = self._round_lock.acquire(timeout=timeout_s) if timeout_s is not None \
            else self._round_lock.acquire(blocking=False)
        if got:
            try:  # no round runs, and none starts now that _stop is set
                self._release()
            finally:
                self._round_lock.release()
        if timeout_s is not None and self._thread.is_alive():
            self._thread.join(timeout_s)

    def run_round(self) -> bool:
        """One scheduled round, if this process holds the lease or can take it. Returns
        whether it ran (False: another process holds the lease, or the loop is stopping)."""
        with self._round_lock:
            if self._stop.is_set() or not self._take():
                return False
            done = threading.Event()
            keeper = threading.Thread(target=_renew, args=(done,), name="lti-sync-lease", daemon=True,
                                      kwargs=dict(take=self._take, period_s=self.lease_s / 3, holder=self.holder,
                                                  name=SYNC_LEASE))
            keeper.start()
            try:
                run_sync_exclusive(self.session_factory, settings=self.settings, now=utc_now(),
                                   holder=self.holder)
                self.rounds += 1
            except LtiSyncRunning:
                logger.info("LMS sync: a round waits for the next tick (another run is under way)")
                return False
            finally:
                done.set()
                keeper.join()
                self._take()  # the lease outlives the wait for the next round
                if self._stop.is_set():  # stop() came during the round
                    self._release()
            return True

    def _take(self) -> bool:
        # A database outage: this tick does not sync.
        held = _take_lease(self.session_factory, name=SYNC_LEASE, holder=self.holder,
                           ttl_s=self.lease_s) is True
        if held != self._holding:
            logger.info("LMS sync: %s %s the scheduled rounds (lease %r)", self.holder,
                        "now runs" if held else "no longer runs", SYNC_LEASE)
            self._holding = held
        return held

    def _release(self) -> None:
        if not self._holding:
            return
        _release_lease(self.session_factory, name=SYNC_LEASE, holder=self.holder)
        self._holding = False

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.run_round()
            except Exception:  # noqa: BLE001 - the loop must outlive one bad run
                logger.exception("LMS sync run failed")
        with self._round_lock:  # stop() may have come as a round renewed the lease
            self._release()
