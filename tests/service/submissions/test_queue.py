"""submissions/repository.py queue protocol: atomic claims (no job claimed twice, even by
many concurrent claimers), leases, expiry, retries, stale writers."""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter

from sqlalchemy.exc import OperationalError

from submissions import repository, service
from submissions.models import INFRASTRUCTURE_ERROR, Grading, SubmissionStatus

from ..helpers import kernel_source, make_outcome

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


def _queue_jobs(committed_db, count: int) -> list[int]:
    with committed_db.session_factory.begin() as session:
        student = service.create_student(session, name="s", now=NOW).student
        ids = [
            repository.insert_submission(
                session, student_id=student.id, assignment="softmax_backward",
                source_text=kernel_source(), source_sha256="0" * 64, source_bytes=10,
                original_filename=None, now=NOW + dt.timedelta(microseconds=i),
            ).id
            for i in range(count)
        ]
    return ids


def test_claims_oldest_first_and_never_twice(committed_db) -> None:
    ids = _queue_jobs(committed_db, 3)
    claimed = []
    for _ in range(4):
        with committed_db.session_factory.begin() as session:
            job = repository.claim_next_submission(session, worker_id="w", lease_s=30, now=NOW)
        claimed.append(job and job.submission_id)
    assert claimed == [*ids, None]


def test_concurrent_claimers_take_each_job_exactly_once(committed_db) -> None:
    job_count, claimer_count = 60, 8
    ids = _queue_jobs(committed_db, job_count)
    start = threading.Barrier(claimer_count)
    claims: list[tuple[int, str]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def claimer(name: str) -> None:
        start.wait()
        try:
            while True:
                try:
                    with committed_db.session_factory.begin() as session:
                        job = repository.claim_next_submission(
                            session, worker_id=name, lease_s=30, now=NOW)
                except OperationalError as exc:  # must not happen (SQLite: busy timeout)
                    errors.append(exc)
                    return
                if job is None:
                    return
                with lock:
                    claims.append((job.submission_id, name))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=claimer, args=(f"w{i}",)) for i in range(claimer_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    counts = Counter(submission_id for submission_id, _ in claims)
    assert sorted(counts) == sorted(ids)
    assert set(counts.values()) == {1}
    with committed_db.session_factory() as session:
        rows = session.query(Grading).all()
        assert {r.status for r in rows} == {"running"} and {r.attempts for r in rows} == {1}
        assert {r.submission_id: r.worker_id for r in rows} == dict(claims)
    if committed_db.backend == "postgres":
        assert len({name for _, name in claims}) > 1  # really concurrent


def test_expired_lease_is_requeued_then_given_up_after_max_attempts(committed_db) -> None:
    [submission_id] = _queue_jobs(committed_db, 1)
    factory = committed_db.session_factory
    for attempt in (1, 2):
        with factory.begin() as session:
            job = repository.claim_next_submission(session, worker_id="dead", lease_s=10, now=NOW)
            assert job.attempt == attempt
        later = NOW + dt.timedelta(seconds=5)
        with factory.begin() as session:  # not yet expired: untouched
            sweep = repository.requeue_expired_leases(session, now=later, max_attempts=2)
            assert sweep.requeued == sweep.abandoned == []
        expired = NOW + dt.timedelta(seconds=11)
        with factory.begin() as session:
            sweep = repository.requeue_expired_leases(session, now=expired, max_attempts=2)
        if attempt == 1:
            assert sweep.requeued == [submission_id]
        else:
            assert sweep.abandoned == [submission_id]
    with factory() as session:
        grading = repository.get_submission(session, submission_id=submission_id).current_grading
        assert grading.status == "error" and grading.error_kind == INFRASTRUCTURE_ERROR
        assert grading.attempts == 2 and "lease" in grading.error_message


def test_a_worker_that_lost_its_lease_cannot_write(committed_db) -> None:
    [submission_id] = _queue_jobs(committed_db, 1)
    factory = committed_db.session_factory
    with factory.begin() as session:
        old = repository.claim_next_submission(session, worker_id="old", lease_s=10, now=NOW)
    expired = NOW + dt.timedelta(seconds=11)
    with factory.begin() as session:
        repository.requeue_expired_leases(session, now=expired, max_attempts=3)
        new = repository.claim_next_submission(session, worker_id="new", lease_s=10, now=expired)
    assert new.submission_id == submission_id and new.lease_token != old.lease_token

    with factory.begin() as session:
        assert not repository.renew_lease(session, submission_id=submission_id,
                                          lease_token=old.lease_token, lease_s=10, now=expired)
        assert not repository.record_grading_outcome(
            session, submission_id=submission_id, lease_token=old.lease_token,
            outcome=make_outcome("failed"), now=expired)
        assert repository.record_infrastructure_failure(
            session, submission_id=submission_id, lease_token=old.lease_token, reason="x",
            attempt=1, max_attempts=3, exit_code=3, grader_stderr="", duration_s=1.0,
            now=expired) is None
        assert repository.renew_lease(session, submission_id=submission_id,
                                      lease_token=new.lease_token, lease_s=10, now=expired)
        assert repository.record_grading_outcome(
            session, submission_id=submission_id, lease_token=new.lease_token,
            outcome=make_outcome("passed", speedup=1.2), now=expired)
    with factory() as session:
        grading = repository.get_submission(session, submission_id=submission_id).current_grading
        assert grading.status == SubmissionStatus.PASSED and grading.worker_id == "new"
        assert [c.name for c in grading.checks] == ["autograd_fp32"]
        assert grading.headline_speedup == 1.2 and grading.lease_token is None
        assert grading.grader_version == "test"


# ----------------------------------------------- a result stored after its lease was lost


def _claim(committed_db, worker_id: str, now: dt.datetime):
    with committed_db.session_factory.begin() as session:
        return repository.claim_next_submission(session, worker_id=worker_id, lease_s=1, now=now)


def _sweep(committed_db, now: dt.datetime) -> None:
    with committed_db.session_factory.begin() as session:
        assert repository.requeue_expired_leases(session, now=now, max_attempts=3).requeued


def _store_late(committed_db, job, outcome, now: dt.datetime):
    with committed_db.session_factory.begin() as session:
        return repository.store_finished_grading(
            session, grading_id=job.grading_id, submission_id=job.submission_id,
            lease_token=job.lease_token, attempt=job.attempt, worker_id="late",
            outcome=outcome, now=now)


def _grading(committed_db, submission_id: int) -> tuple[Grading, list[str]]:
    with committed_db.session_factory() as session:
        grading = repository.get_submission(session, submission_id=submission_id).current_grading
        return grading, [c.message for c in grading.checks]


def test_a_result_under_a_held_lease_is_stored(committed_db) -> None:
    [submission_id] = _queue_jobs(committed_db, 1)
    job = _claim(committed_db, "a", NOW)
    written = _store_late(committed_db, job, make_outcome("passed"), NOW)
    assert written is repository.FinishedGradingWrite.STORED
    grading, _ = _grading(committed_db, submission_id)
    assert (grading.status, grading.attempts, grading.worker_id) == ("passed", 1, "a")


def test_a_result_after_the_lease_was_swept_is_stored_and_the_job_not_claimed_again(
        committed_db) -> None:
    [submission_id] = _queue_jobs(committed_db, 1)
    job = _claim(committed_db, "a", NOW)
    _sweep(committed_db, NOW + dt.timedelta(seconds=5))  # outage longer than the lease
    written = _store_late(committed_db, job, make_outcome("failed"), NOW + dt.timedelta(seconds=6))
    assert written is repository.FinishedGradingWrite.STORED_AFTER_LEASE_LOSS
    grading, _ = _grading(committed_db, submission_id)
    assert (grading.status, grading.attempts, grading.lease_token) == ("failed", 1, None)
    assert _claim(committed_db, "b", NOW + dt.timedelta(seconds=7)) is None  # never re-graded


def test_a_late_result_fences_out_the_worker_that_reclaimed_the_job(committed_db) -> None:
    [submission_id] = _queue_jobs(committed_db, 1)
    job_a = _claim(committed_db, "a", NOW)
    _sweep(committed_db, NOW + dt.timedelta(seconds=5))
    job_b = _claim(committed_db, "b", NOW + dt.timedelta(seconds=5))
    assert job_b.attempt == 2
    later = NOW + dt.timedelta(seconds=6)
    assert _store_late(committed_db, job_a, make_outcome("failed"), later) is \
        repository.FinishedGradingWrite.STORED_AFTER_LEASE_LOSS
    with committed_db.session_factory.begin() as session:
        assert not repository.renew_lease(session, submission_id=submission_id,
                                          lease_token=job_b.lease_token, lease_s=30, now=later)
        assert not repository.record_grading_outcome(
            session, submission_id=submission_id, lease_token=job_b.lease_token,
            outcome=make_outcome("passed"), now=later)
    grading, messages = _grading(committed_db, submission_id)
    assert (grading.status, grading.worker_id) == ("failed", "late")
    assert len(messages) == 1  # one set of verdicts


def test_a_late_result_never_overwrites_a_finished_grading(committed_db) -> None:
    [submission_id] = _queue_jobs(committed_db, 1)
    job_a = _claim(committed_db, "a", NOW)
    _sweep(committed_db, NOW + dt.timedelta(seconds=5))
    job_b = _claim(committed_db, "b", NOW + dt.timedelta(seconds=5))
    with committed_db.session_factory.begin() as session:
        assert repository.record_grading_outcome(
            session, submission_id=submission_id, lease_token=job_b.lease_token,
            outcome=make_outcome("passed"), now=NOW + dt.timedelta(seconds=6))
    assert _store_late(committed_db, job_a, make_outcome("failed"),
                       NOW + dt.timedelta(seconds=7)) is \
        repository.FinishedGradingWrite.ALREADY_FINISHED
    grading, messages = _grading(committed_db, submission_id)
    assert (grading.status, grading.worker_id, grading.attempts) == ("passed", "b", 2)
    assert messages == ["ok"]
