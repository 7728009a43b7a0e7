"""The worker loop: sweep expired leases, claim the oldest queued job, grade it in a
`grader check` subprocess while a heartbeat thread renews the lease, store the outcome.

One worker grades one job at a time (timing needs the GPU to itself); run one worker per
GPU. Workers on many hosts can share one PostgreSQL database.

Transactions belong to this module's job wrapper: each step (sweep, claim, record) is one
short transaction; no transaction is open while the grader runs.

A finished grading is never thrown away because the database is briefly unreachable: it is
spooled to a local file (submissions/spool.py), then stored with retries (capped exponential
backoff with jitter) while the heartbeat thread keeps renewing the lease; the file is
deleted once the database has the result. A worker that stops (or is killed) before that
leaves the file, and the next worker started on the host stores it before claiming
anything. The store is fenced in the database (`repository.store_finished_grading`): a
result arriving after the lease was lost is still stored if nobody finished the grading,
and never twice.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from grader.stages import StageReport
from submissions import repository, similarity, slip_days
from submissions.grading import GradingCancelled, InfrastructureFailure, WarmGrader, run_grader
from submissions.models import utc_now
from submissions.placement import describe_gpu, describe_launcher, format_cpu_list
from submissions.repository import ClaimedJob, FinishedGradingWrite
from submissions.service import derive_grading_seed
from submissions.settings import Settings
from submissions.spool import ResultSpool, SpooledResult

logger = logging.getLogger("submissions.worker")

#: First pause (seconds) before retrying a failed database write; it doubles on each
#: failure up to ``settings.record_retry_max_s``, each pause drawn uniformly from its upper
#: half (jitter, so that workers do not retry in step when the database returns).
RECORD_RETRY_FIRST_S = 0.2


def backoff_delays(first_s: float, max_s: float, rng: random.Random | None = None
                   ) -> Iterator[float]:
    """Endless pauses (seconds) for retries: ``min(max_s, first_s * 2**n)``, each drawn
    uniformly from ``[d/2, d]``."""
    rng = rng or random.Random()
    delay = first_s
    while True:
        yield rng.uniform(delay / 2, delay)
        delay = min(max_s, delay * 2)


def default_worker_id() -> str:
    """``host:pid:random`` — unique per worker process, readable in /healthz."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class _CurrentJob:
    job: ClaimedJob
    cancel: threading.Event = field(default_factory=threading.Event)
    lease_lost: bool = False
    # The grader returned an outcome: storing it clears the lease token, so a renewal that
    # fails from then on is the store's doing, not a lost lease.
    graded: bool = False


class Worker:
    """Grades queued submissions one at a time.

    Thread-safety: `run_forever` (or `process_next_job`) runs in one thread; the heartbeat
    thread started by `run_forever` only renews the lease of the current job and refreshes
    the worker's heartbeat row, each in its own short transaction.
    """

    def __init__(
        self,
        settings: Settings,
        session_factory: sessionmaker[Session],
        *,
        worker_id: str | None = None,
    ) -> None:
        self.settings = settings
        self.session_factory = session_factory
        self.worker_id = worker_id or default_worker_id()
        self.started_at = utc_now()
        self._lock = threading.Lock()
        self._current: _CurrentJob | None = None
        self._stop = threading.Event()
        self._warm: WarmGrader | None = None  # the next job's grader, started ahead
        self.spool = ResultSpool(settings.result_spool_dir, database_url=settings.database_url)

    # ------------------------------------------------------------------ public loop

    def run_forever(self) -> None:
        """Process jobs until `request_stop()` is called. A job being graded when the stop
        arrives is cancelled and handed back to the queue."""
        heartbeat = threading.Thread(
            target=self._heartbeat_loop, name=f"heartbeat-{self.worker_id}", daemon=True
        )
        heartbeat.start()
        logger.info("worker %s started", self.worker_id)
        try:
            self.flush_spool()
            self._prepare_warm_grader()
            idle_since = time.monotonic()
            while not self._stop.is_set():
                try:
                    processed = self.process_next_job()
                except SQLAlchemyError:
                    logger.exception("worker %s: database error; retrying", self.worker_id)
                    processed = False
                if processed:
                    idle_since = time.monotonic()
                    continue
                idle_exit_s = self.settings.worker_idle_exit_s
                if idle_exit_s is not None and time.monotonic() - idle_since >= idle_exit_s:
                    logger.info("worker %s: no job for %.0f s; exiting (GRADER_WORKER_IDLE_EXIT_S)",
                                self.worker_id, idle_exit_s)
                    break
                self._stop.wait(self.settings.poll_interval_s)
        finally:
            self._stop.set()
            if self._warm is not None:
                self._warm.close()
                self._warm = None
            heartbeat.join(timeout=5)
            try:
                with self.session_factory.begin() as session:
                    repository.delete_worker_heartbeat(session, worker_id=self.worker_id)
            except SQLAlchemyError:
                logger.warning("worker %s: could not remove its heartbeat row", self.worker_id)
            logger.info("worker %s stopped", self.worker_id)

    def request_stop(self) -> None:
        """Ask the loop to stop; cancels the grading in progress (signal-handler safe)."""
        self._stop.set()
        current = self._current
        if current is not None:
            current.cancel.set()

    def flush_spool(self) -> int:
        """Store the results spooled by earlier workers on this host for this database
        (before claiming anything). Retries while the database is unreachable, until it
        answers or `request_stop()` is called; returns how many files were settled
        (stored, or found already finished and deleted)."""
        settled = 0
        for result in self.spool.pending():
            logger.info(
                "submission %s: storing the result spooled by %s",
                result.submission_id, result.worker_id,
            )
            if self._store_durably(result):
                self.spool.remove(result)
                settled += 1
        return settled

    def process_next_job(self) -> bool:
        """Sweep expired leases, claim one job and grade it. Returns False if the queue was
        empty. Raises sqlalchemy errors from the sweep or the claim."""
        now = utc_now()
        with self.session_factory.begin() as session:
            sweep = repository.requeue_expired_leases(
                session, now=now, max_attempts=self.settings.max_attempts
            )
        for submission_id in sweep.requeued:
            logger.warning("submission %s: lease expired, re-queued", submission_id)
        for submission_id in sweep.abandoned:
            logger.error("submission %s: lease expired too often, marked error", submission_id)

        with self.session_factory.begin() as session:
            job = repository.claim_next_submission(
                session, worker_id=self.worker_id, lease_s=self.settings.lease_s, now=utc_now()
            )
        if job is None:
            return self._review_next()
        self._grade(job)
        self._prepare_warm_grader()
        return True

    def _review_next(self) -> bool:
        """When no grading waits: claim a queued similarity review and run it (in a child
        process with a time limit, seconds to a minute for a class: submissions/similarity.py;
        `request_stop()` hands it back). Returns False if none was queued. Raises sqlalchemy
        errors."""
        with self.session_factory.begin() as session:
            claimed = repository.claim_next_similarity_run(
                session, worker_id=self.worker_id, lease_s=similarity.LEASE_S,
                max_attempts=self.settings.max_attempts, now=utc_now())
        if claimed is None:
            return False
        logger.info("worker %s: similarity review %s of %s (attempt %s)", self.worker_id,
                    claimed.run_id, claimed.assignment, claimed.attempt)
        similarity.execute_run(self.session_factory, claimed, cancel=self._stop)
        return True

    def _prepare_warm_grader(self) -> None:
        """Start the grader of the next job now (``settings.grader_warm_start``), unless one
        waits already; a grader that cannot start is started again with its job. Called from
        the worker's loop thread only: a grader's parent-death signal (PR_SET_PDEATHSIG) fires
        when the thread that started it ends, not the process."""
        if not self.settings.grader_warm_start or self._stop.is_set():
            return
        if self._warm is not None and self._warm.process.poll() is None:
            return
        if self._warm is not None:
            self._warm.close()
        try:
            self._warm = WarmGrader(self.settings)
        except Exception as exc:  # noqa: BLE001 - e.g. a full disk: the job starts its grader itself
            reason = exc.reason if isinstance(exc, InfrastructureFailure) else f"{type(exc).__name__}: {exc}"
            logger.warning("worker %s: could not start the next grader ahead: %s", self.worker_id, reason)
            self._warm = None

    # ------------------------------------------------------------------ one job

    def _grade(self, job: ClaimedJob) -> None:
        current = _CurrentJob(job=job)
        with self._lock:
            self._current = current
        logger.info(
            "worker %s: grading submission %s (attempt %s)",
            self.worker_id, job.submission_id, job.attempt,
        )
        try:
            seed = job.seed if job.seed is not None else derive_grading_seed(
                deployment_seed=self.settings.deployment_seed.get_secret_value(),
                submission_id=job.submission_id,
            )
            warm, self._warm = self._warm, None
            # The next job's grader starts now, beside this grading, so that a job claimed right
            # after this one finds it loaded (a deadline queue). Its start-up no longer slows
            # this grading's CPU work: the grading processes' idle OpenMP threads sleep
            # (grader/sandbox/openmp.py; docs/benchmarks.md).
            self._prepare_warm_grader()
            try:
                outcome = run_grader(
                    self.settings,
                    assignment=job.assignment,
                    source_text=job.source_text,
                    seed=seed,
                    cancel=current.cancel,
                    warm=warm,
                    on_stage=lambda report: self._record_stage(job, report),
                )
            except GradingCancelled:
                self._after_cancel(current)
                return
            except InfrastructureFailure as failure:
                logger.warning(
                    "submission %s: infrastructure failure: %s", job.submission_id, failure.reason
                )
                self._record_infrastructure_failure(job, failure)
                return
            except Exception as exc:  # noqa: BLE001 - a bug here must not lose the job
                logger.exception("submission %s: worker error", job.submission_id)
                self._record_infrastructure_failure(
                    job, InfrastructureFailure(reason=f"worker error: {type(exc).__name__}: {exc}")
                )
                return
            logger.info("submission %s: %s", job.submission_id, outcome.status)
            current.graded = True
            self._keep_result(
                SpooledResult(
                    database=self.spool.database,
                    worker_id=self.worker_id,
                    grading_id=job.grading_id,
                    submission_id=job.submission_id,
                    lease_token=job.lease_token,
                    attempt=job.attempt,
                    finished_at=utc_now(),
                    outcome=outcome,
                )
            )
        finally:
            with self._lock:
                self._current = None

    def _record_infrastructure_failure(self, job: ClaimedJob, failure: InfrastructureFailure) -> None:
        """Store a grading that broke for reasons not the submission's (retried up to
        ``max_attempts``, never charged to the student's rate limit)."""
        self._record(
            job,
            lambda session: repository.record_infrastructure_failure(
                session,
                submission_id=job.submission_id,
                lease_token=job.lease_token,
                reason=failure.reason,
                attempt=job.attempt,
                max_attempts=self.settings.max_attempts,
                exit_code=failure.exit_code,
                grader_stderr=failure.grader_stderr,
                duration_s=failure.duration_s,
                now=utc_now(),
            ),
        )

    def _after_cancel(self, current: _CurrentJob) -> None:
        job = current.job
        if current.lease_lost:
            logger.warning(
                "submission %s: lease lost during grading; result discarded", job.submission_id
            )
            return
        # Shutdown: hand the job back without charging an attempt.
        self._record(
            job,
            lambda session: repository.release_claim(
                session, submission_id=job.submission_id, lease_token=job.lease_token
            ),
        )

    def _keep_result(self, result: SpooledResult) -> None:
        """Spool a finished grading, store it (retrying through database outages while the
        heartbeat renews the lease), then delete the spool file. If the worker is asked to
        stop before the database takes it, the file stays for the next worker."""
        try:
            self.spool.put(result)
            spooled = True
        except OSError:
            logger.exception(
                "submission %s: cannot spool the result to %s; storing it without a spool",
                result.submission_id, self.spool.directory,
            )
            spooled = False
        if self._store_durably(result):
            if spooled:
                self.spool.remove(result)
        elif spooled:
            logger.warning(
                "submission %s: stopping before the database took the result; it stays in %s",
                result.submission_id, self.spool.path_for(result),
            )
        else:
            logger.error(
                "submission %s: stopping before the database took the result, and it could "
                "not be spooled: it will be graded again", result.submission_id,
            )

    def _store_durably(self, result: SpooledResult) -> bool:
        """Store `result` (fenced: `repository.store_finished_grading`), retrying database
        errors with capped exponential backoff and jitter. Returns True once the database
        has settled it (stored, or found already finished), False if `request_stop()` came
        first."""
        delays = backoff_delays(RECORD_RETRY_FIRST_S, self.settings.record_retry_max_s)
        tries = 0
        started = time.monotonic()
        while True:
            tries += 1
            try:
                with self.session_factory.begin() as session:
                    written = repository.store_finished_grading(
                        session,
                        grading_id=result.grading_id,
                        submission_id=result.submission_id,
                        lease_token=result.lease_token,
                        attempt=result.attempt,
                        worker_id=result.worker_id,
                        outcome=result.outcome,
                        now=result.finished_at,
                    )
            except SQLAlchemyError as exc:
                delay = next(delays)
                logger.warning(
                    "submission %s: storing the result failed (try %s, %.1f s so far; "
                    "next in %.1f s): %s",
                    result.submission_id, tries, time.monotonic() - started, delay,
                    str(exc).splitlines()[0][:200],
                )
                if self._stop.wait(delay):
                    return False
                continue
            if written is FinishedGradingWrite.ALREADY_FINISHED:
                logger.warning(
                    "submission %s: the grading was already finished elsewhere; result discarded",
                    result.submission_id,
                )
            elif written is FinishedGradingWrite.STORED_AFTER_LEASE_LOSS:
                logger.warning(
                    "submission %s: result stored after the lease was lost (try %s)",
                    result.submission_id, tries,
                )
            elif tries > 1:
                logger.info(
                    "submission %s: result stored on try %s after %.1f s",
                    result.submission_id, tries, time.monotonic() - started,
                )
            if written is not FinishedGradingWrite.ALREADY_FINISHED:
                self._rederive_slip_days(result.submission_id)
            return True

    def _rederive_slip_days(self, submission_id: int) -> None:
        """Re-derive the owner's slip days now that a grading of theirs has a verdict (which
        submission counts may have changed: submissions/slip_days.py). Its own transaction,
        after the result is stored: a failure here never costs a result, and the next upload,
        regrade or settings change derives them again."""
        try:
            with self.session_factory.begin() as session:
                submission = repository.get_submission(session, submission_id=submission_id)
                if submission is not None:
                    slip_days.rederive(session, student_id=submission.student_id, now=utc_now())
        except Exception:  # noqa: BLE001 - logged; the result itself is stored
            logger.exception("submission %s: re-deriving slip days failed", submission_id)

    def _record(self, job: ClaimedJob, write: Callable[[Session], object]) -> None:
        """Run `write` (an infrastructure failure or a hand-back; fenced by the lease token)
        in one transaction, retrying database errors with capped exponential backoff and
        jitter for up to one lease length, or until `request_stop()`. If it still fails, the
        job is left running; its lease expires and the sweep re-queues it, which is what
        either write would have done."""
        delays = backoff_delays(RECORD_RETRY_FIRST_S, self.settings.record_retry_max_s)
        deadline = time.monotonic() + self.settings.lease_s
        while True:
            try:
                with self.session_factory.begin() as session:
                    written = write(session)
                if written is False or written is None:
                    logger.warning(
                        "submission %s: lease no longer held; outcome discarded",
                        job.submission_id,
                    )
                else:  # an infrastructure error shown as final may change what counts
                    self._rederive_slip_days(job.submission_id)
                return
            except SQLAlchemyError:
                logger.exception("submission %s: storing the outcome failed", job.submission_id)
                delay = next(delays)
                if time.monotonic() + delay > deadline or self._stop.wait(delay):
                    logger.error(
                        "submission %s: giving up; the lease will expire and the sweep "
                        "re-queues the job", job.submission_id,
                    )
                    return

    def _record_stage(self, job: ClaimedJob, report: StageReport) -> None:
        """Store the stage the grader entered on the grading's row (one short transaction per
        stage, a few per grading). A failure is logged and ignored: the stage is a label."""
        try:
            with self.session_factory.begin() as session:
                repository.record_stage(session, submission_id=job.submission_id, lease_token=job.lease_token,
                                        stage=report.stage.value, started_at=report.at)
        except Exception:  # noqa: BLE001 - never lose a grading for its label
            logger.warning("submission %s: could not store its stage %s", job.submission_id, report.stage.value,
                           exc_info=True)

    # ------------------------------------------------------------------ heartbeat

    def _heartbeat_loop(self) -> None:
        hostname = socket.gethostname()
        gpu = describe_gpu(os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0] or None,
                           device=self.settings.grader_device)
        cpus = format_cpu_list(sorted(os.sched_getaffinity(0)))
        launcher = describe_launcher(os.environ)
        while not self._stop.is_set():
            with self._lock:
                current = self._current
            try:
                with self.session_factory.begin() as session:
                    now = utc_now()
                    if current is not None and not current.cancel.is_set():
                        held = repository.renew_lease(
                            session,
                            submission_id=current.job.submission_id,
                            lease_token=current.job.lease_token,
                            lease_s=self.settings.lease_s,
                            now=now,
                        )
                        if not held and not current.graded:
                            current.lease_lost = True
                            current.cancel.set()
                            logger.warning(
                                "submission %s: lease lost; stopping the grader",
                                current.job.submission_id,
                            )
                    repository.upsert_worker_heartbeat(
                        session,
                        worker_id=self.worker_id,
                        hostname=hostname,
                        pid=os.getpid(),
                        started_at=self.started_at,
                        current_submission_id=current.job.submission_id if current else None,
                        now=now,
                        gpu=gpu,
                        cpus=cpus,
                        launcher=launcher,
                    )
            except SQLAlchemyError:
                logger.exception("worker %s: heartbeat failed", self.worker_id)
            self._stop.wait(self.settings.lease_renewal_s)
