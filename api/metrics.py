"""Prometheus metrics computed from the database at scrape time.

Because workers run in other processes (and on other hosts), in-process counters would
see only a fraction of the gradings; the database sees them all. Every scrape runs a few
aggregate queries (submissions/repository.py). The one exception is this API process's
admission (api/admission.py: places held, the queue, refusals), which only it knows: those
series are per process (``grader_api_...``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry
from sqlalchemy.orm import Session

from api.admission import Admission
from submissions import repository
from submissions.models import SubmissionStatus, utc_now

#: Grading duration histogram bounds, seconds (CPU interpreter runs take minutes).
DURATION_BUCKETS_S = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)


class SubmissionsCollector(Collector):
    """Queue depth, submissions by status, gradings by verdict, grading durations, workers."""

    def __init__(self, session: Session, *, worker_stale_after_s: float) -> None:
        self.session = session
        self.worker_stale_after_s = worker_stale_after_s

    def collect(self) -> Iterator[Metric]:
        session = self.session
        by_status = repository.count_submissions_by_status(session)
        by_verdict = repository.count_gradings_by_verdict(session)
        histogram = repository.grading_duration_histogram(session, bounds=DURATION_BUCKETS_S)
        heartbeats = repository.list_worker_heartbeats(session)

        yield GaugeMetricFamily(
            "grader_queue_depth", "Gradings waiting for a worker (uploads, regrades, final runs)",
            value=repository.count_queued_gradings(session),
        )
        status_gauge = GaugeMetricFamily(
            "grader_submissions", "Submissions by current status", labels=["status"]
        )
        for status in SubmissionStatus:
            status_gauge.add_metric([status.value], by_status.get(status.value, 0))
        yield status_gauge

        gradings = CounterMetricFamily(
            "grader_gradings", "Finished gradings by verdict and error kind",
            labels=["verdict", "error_kind"],
        )
        for (verdict, kind), count in sorted(by_verdict.items()):
            gradings.add_metric([verdict, kind], count)
        yield gradings

        buckets = [(f"{bound:g}", count) for bound, count in histogram.buckets]
        buckets.append(("+Inf", histogram.count))
        yield HistogramMetricFamily(
            "grader_grading_duration_seconds", "Wall time of finished gradings",
            buckets=buckets, sum_value=histogram.total_s,
        )

        cutoff = utc_now() - dt.timedelta(seconds=self.worker_stale_after_s)
        yield GaugeMetricFamily(
            "grader_workers_alive", "Workers with a recent heartbeat",
            value=sum(1 for h in heartbeats if h.last_seen_at >= cutoff),
        )
        by_gpu = GaugeMetricFamily(
            "grader_workers_alive_by_gpu", "Workers with a recent heartbeat, by GPU model ('none': CPU)",
            labels=["gpu"],
        )
        models: dict[str, int] = {}
        for h in heartbeats:
            if h.last_seen_at >= cutoff:
                model = (h.gpu or "none").split(",")[0]
                models[model] = models.get(model, 0) + 1
        for model, count in sorted(models.items()):
            by_gpu.add_metric([model], count)
        yield by_gpu
        fleet_jobs = GaugeMetricFamily(
            "grader_fleet_jobs", "Worker jobs of each fleet controller on its scheduler, at its last tick",
            labels=["fleet", "scheduler", "state"],
        )
        fleet_max = GaugeMetricFamily(
            "grader_fleet_max_jobs", "The most worker jobs each fleet controller may run", labels=["fleet", "scheduler"],
        )
        for controller in repository.list_fleet_controllers(session):
            fleet_jobs.add_metric([controller.name, controller.scheduler, "pending"], controller.pending_jobs)
            fleet_jobs.add_metric([controller.name, controller.scheduler, "running"], controller.running_jobs)
            fleet_max.add_metric([controller.name, controller.scheduler], controller.max_jobs)
        yield fleet_jobs
        yield fleet_max


class AdmissionCollector(Collector):
    """This API process's admission: requests holding a place and queued for one, long-polls
    waiting, requests admitted after a wait and the longest such wait, refusals by reason.
    Read from a worker thread while the event loop changes them: a snapshot, each number
    exact, the numbers not taken at one instant."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission

    def collect(self) -> Iterator[Metric]:
        admission, gate = self.admission, self.admission.api
        yield GaugeMetricFamily("grader_api_requests_in_flight",
                                "Requests holding an admission place (this API process)",
                                value=gate.holders)
        yield GaugeMetricFamily("grader_api_requests_queued",
                                "Requests waiting for an admission place (this API process)",
                                value=gate.queued)
        yield GaugeMetricFamily("grader_api_long_polls_waiting",
                                "Long-polls waiting for a change (this API process)",
                                value=admission.waiting)
        yield CounterMetricFamily("grader_api_requests_admitted_after_wait",
                                  "Requests admitted after waiting in the queue",
                                  value=gate.admitted_after_wait)
        yield GaugeMetricFamily("grader_api_queue_longest_wait_seconds",
                                "The longest wait of a request admitted from the queue",
                                value=gate.longest_wait_s)
        refused = CounterMetricFamily(
            "grader_api_requests_refused", "Requests answered 503 overloaded, by reason: the "
            "queue was full, the wait exceeded its allowance, the queue's drain rate said it "
            "would, or a health check or long-poll found its own bound reached",
            labels=["reason"])
        refused.add_metric(["queue_full"], gate.refused_full)
        refused.add_metric(["waited_too_long"], gate.refused_late)
        refused.add_metric(["predicted_too_long"], gate.refused_predicted)
        refused.add_metric(["health_or_long_poll"], admission.refused_other)
        yield refused


def build_registry(session: Session, *, worker_stale_after_s: float,
                   admission: Admission | None = None) -> CollectorRegistry:
    """A registry for one scrape, reading through the request's session (no global state,
    so several apps can live in one test process), with this process's `admission` when
    given."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SubmissionsCollector(session, worker_stale_after_s=worker_stale_after_s))
    if admission is not None:
        registry.register(AdmissionCollector(admission))
    return registry
