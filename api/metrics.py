"""Prometheus metrics computed from the database at scrape time.

Because workers run in other processes (and on other hosts), in-process counters would
see only a fraction of the gradings; the database sees them all. Every scrape runs a few
aggregate queries (submissions/repository.py).
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


def build_registry(session: Session, *, worker_stale_after_s: float) -> CollectorRegistry:
    """A registry for one scrape, reading through the request's session (no global state,
    so several apps can live in one test process)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SubmissionsCollector(session, worker_stale_after_s=worker_stale_after_s))
    return registry
