"""Start the stack for a load run, inject faults during the load, and record it all.

    python scripts/load_stack.py --students 200 --max-duration 1200

The stack: a fresh PostgreSQL database ``loadtest_<stamp>`` on the server named by
``GRADER_TEST_POSTGRES_URL`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``),
reached by every service process through a cuttable TCP proxy (tests/service/tcp_proxy.py);
`grader serve --workers-embedded 0` (the API) and 2 `grader worker` processes grading on the
CPU interpreter (the assignment's real grading). scripts/loadtest.py drives the load in this
process while a fault thread, at offsets (seconds) from the first upload:

- ``--kill-worker-at``: waits until worker 1 is grading, SIGKILLs it, restarts it 2 s later
  (same spool folder, a new worker id);
- ``--cut-db-at`` / ``--cut-db-s``: cuts the proxy (new connections refused, open ones
  aborted) for 15 s;
- ``--restart-api-at``: SIGTERMs the API and starts it again on the same port.

At the end it audits the database directly (gradings attempted more than once, statuses,
spool files left) and writes one JSON file (`StackRun`) under docs/reliability/ with the
date, the machine, the versions and the command line. The database is dropped afterwards
(``--keep-database`` keeps it).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import importlib.metadata
import json
import os
import platform
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
from pydantic import BaseModel
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPOSITORY_ROOT), str(REPOSITORY_ROOT / "scripts")]

from loadtest import LoadConfig, LoadResult, run_load  # noqa: E402

from tests.service.tcp_proxy import CuttableProxy  # noqa: E402

INSTRUCTOR_TOKEN = "load-instructor-token-0123456789"
DEFAULT_POSTGRES_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
OUTPUT_DIR = REPOSITORY_ROOT / "docs" / "reliability"


class FaultEvent(BaseModel):
    """One injected fault: when (seconds after the first upload), what, what was seen."""

    fault: str
    at_s: float
    duration_s: float | None
    detail: dict[str, object]


class DatabaseAudit(BaseModel):
    """The queue as the database saw it after the run (queried directly, not through the
    proxy)."""

    submissions: int
    gradings_by_status: dict[str, int]
    gradings_attempted_more_than_once: list[dict[str, object]]
    finished_gradings_per_submission_max: int
    spool_files_left: int
    worker_log_lines: dict[str, int]


class StackRun(BaseModel):
    """One recorded run of scripts/load_stack.py (the JSON under docs/reliability/)."""

    date: dt.datetime
    command_line: str
    machine: dict[str, object]
    versions: dict[str, str | None]
    settings: dict[str, str]
    load: LoadResult
    faults: list[FaultEvent]
    audit: DatabaseAudit
    notes: list[str]


# ------------------------------------------------------------------------ processes


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Stack:
    """The API and worker processes, their environment and logs."""

    def __init__(self, database_url: str, workdir: Path, port: int, grader_device: str) -> None:
        self.workdir = workdir
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}"
        self.settings = {
            "GRADER_DATABASE_URL": database_url,
            "GRADER_INSTRUCTOR_TOKEN": INSTRUCTOR_TOKEN,
            "GRADER_DEPLOYMENT_SEED": "load-test-seed",
            "GRADER_GRADER_DEVICE": grader_device,
            "GRADER_WORKER_SPOOL_DIR": str(workdir / "spool"),
        }
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GRADER_")}
        self.env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(REPOSITORY_ROOT), self.env.get("PYTHONPATH")]))
        self.env.update(self.settings)
        self.api: subprocess.Popen[bytes] | None = None
        self.workers: dict[int, subprocess.Popen[bytes]] = {}
        self.worker_ids: dict[int, str] = {}
        self.restarts = 0

    def _spawn(self, args: list[str], log_name: str) -> subprocess.Popen[bytes]:
        log = (self.workdir / log_name).open("ab")
        return subprocess.Popen([sys.executable, "-m", "grader", *args], cwd=self.workdir,
                                env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)

    def start_api(self) -> float:
        """Start `grader serve` (no embedded worker); returns seconds until /healthz
        answers."""
        started = time.monotonic()
        self.api = self._spawn(["serve", "--port", str(self.port), "--workers-embedded", "0",
                                "--log-level", "warning"], "api.log")
        while True:
            if self.api.poll() is not None:
                raise RuntimeError(f"grader serve exited: {(self.workdir / 'api.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=2).status_code in (200, 503):
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            time.sleep(0.2)

    def stop_api(self) -> None:
        """SIGTERM the API and wait for it."""
        if self.api is not None and self.api.poll() is None:
            self.api.send_signal(signal.SIGTERM)
            try:
                self.api.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.api.kill()
                self.api.wait()

    def start_worker(self, index: int) -> str:
        """Start worker `index`; returns its worker id."""
        worker_id = f"load-w{index}" + (f"-r{self.restarts}" if self.restarts else "")
        self.workers[index] = self._spawn(["worker", "--worker-id", worker_id],
                                          f"worker{index}.log")
        self.worker_ids[index] = worker_id
        return worker_id

    def stop_all(self) -> None:
        """SIGTERM every process (workers first), then wait."""
        for process in self.workers.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.workers.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.stop_api()


# ------------------------------------------------------------------------ faults


class Faults:
    """The fault schedule, run in a thread once the load's first upload is sent."""

    def __init__(self, stack: Stack, proxy: CuttableProxy, direct: object, args: argparse.Namespace
                 ) -> None:
        self.stack, self.proxy, self.direct, self.args = stack, proxy, direct, args
        self.events: list[FaultEvent] = []
        self.t0: float | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def begin(self) -> None:
        self.t0 = time.monotonic()
        self.thread.start()

    def _now(self) -> float:
        assert self.t0 is not None
        return round(time.monotonic() - self.t0, 1)

    def _sleep_until(self, offset: float) -> bool:
        assert self.t0 is not None
        return not self.stop.wait(max(0.0, self.t0 + offset - time.monotonic()))

    def _run(self) -> None:
        schedule = sorted(
            (at, name) for at, name in ((self.args.kill_worker_at, "kill_worker"),
                                        (self.args.cut_db_at, "cut_db"),
                                        (self.args.restart_api_at, "restart_api"))
            if at is not None and at >= 0)
        for at, name in schedule:
            if not self._sleep_until(at):
                return
            try:
                getattr(self, name)()
            except Exception as exc:  # noqa: BLE001 - recorded, the run goes on
                self.events.append(FaultEvent(fault=name, at_s=self._now(), duration_s=None,
                                              detail={"error": repr(exc)}))

    def _grading_of(self, worker_id: str) -> int | None:
        with self.direct.connect() as connection:  # type: ignore[attr-defined]
            return connection.execute(text(
                "SELECT current_submission_id FROM worker_heartbeats WHERE worker_id = :w"),
                {"w": worker_id}).scalar()

    def kill_worker(self) -> None:
        """SIGKILL worker 0 while it grades (waits up to 120 s for it to grade), restart
        it 2 s later."""
        worker_id = self.stack.worker_ids[0]
        deadline = time.monotonic() + 120
        submission_id = None
        while submission_id is None and time.monotonic() < deadline and not self.stop.is_set():
            submission_id = self._grading_of(worker_id)
            if submission_id is None:
                time.sleep(0.2)
        at = self._now()
        self.stack.workers[0].send_signal(signal.SIGKILL)
        self.stack.workers[0].wait()
        time.sleep(2)
        killed = time.monotonic()
        time.sleep(2)
        self.stack.restarts += 1
        new_id = self.stack.start_worker(0)
        self.events.append(FaultEvent(fault="sigkill_worker", at_s=at, duration_s=2.0, detail={
            "killed_worker_id": worker_id, "grading_submission_id": submission_id,
            "restarted_as": new_id,
            "healthz_dead_after_s": self._healthz_dead_after(worker_id, killed)}))

    def _healthz_dead_after(self, worker_id: str, killed: float) -> float | None:
        """Seconds from the SIGKILL until /healthz reports `worker_id` not alive (None if
        not seen within 120 s)."""
        while time.monotonic() - killed < 120 and not self.stop.is_set():
            try:
                workers = httpx.get(f"{self.stack.base_url}/healthz", timeout=5).json()["workers"]
                if any(w["worker_id"] == worker_id and not w["alive"] for w in workers):
                    return round(time.monotonic() - killed, 1)
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.5)
        return None

    def cut_db(self) -> None:
        """Cut the proxy between every service process and PostgreSQL for --cut-db-s."""
        at = self._now()
        self.proxy.cut()
        self.stop.wait(self.args.cut_db_s)
        self.proxy.restore()
        self.events.append(FaultEvent(fault="postgres_cut", at_s=at,
                                      duration_s=self.args.cut_db_s, detail={}))

    def restart_api(self) -> None:
        """SIGTERM the API process and start it again on the same port."""
        at = self._now()
        self.stack.stop_api()
        stopped = self._now()
        ready_s = self.stack.start_api()
        self.events.append(FaultEvent(fault="api_restart", at_s=at, duration_s=round(
            stopped - at + ready_s, 2), detail={"stop_s": round(stopped - at, 2),
                                                "start_until_healthz_s": round(ready_s, 2)}))


# ------------------------------------------------------------------------ metadata


def machine() -> dict[str, object]:
    """nproc, RAM (bytes), CPU model, kernel, load average at the start."""
    meminfo = Path("/proc/meminfo").read_text().split("\n")
    ram_kib = next(int(line.split()[1]) for line in meminfo if line.startswith("MemTotal"))
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().split("\n") if line.startswith("model name")),
               platform.processor())
    return {"nproc": os.cpu_count(), "ram_bytes": ram_kib * 1024, "cpu": cpu,
            "kernel": platform.release(), "loadavg_at_start": os.getloadavg()}


def versions(direct: object) -> dict[str, str | None]:
    """Python, the service's libraries and the PostgreSQL server."""
    out: dict[str, str | None] = {"python": platform.python_version()}
    for package in ("torch", "triton", "fastapi", "sqlalchemy", "psycopg", "httpx", "uvicorn",
                    "pydantic"):
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = None
    with direct.connect() as connection:  # type: ignore[attr-defined]
        out["postgresql"] = connection.execute(text("SHOW server_version")).scalar()
    return out


def audit(direct: object, stack: Stack) -> DatabaseAudit:
    """The queue's state after the run, queried directly."""
    with direct.connect() as connection:  # type: ignore[attr-defined]
        by_status = dict(connection.execute(text(
            "SELECT status, count(*) FROM gradings GROUP BY status")).all())
        retried = [dict(row._mapping) for row in connection.execute(text(
            "SELECT submission_id, status, attempts, worker_id, last_attempt_error "
            "FROM gradings WHERE attempts > 1 ORDER BY submission_id")).all()]
        submissions = connection.execute(text("SELECT count(*) FROM submissions")).scalar()
        finished_max = connection.execute(text(
            "SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n FROM gradings WHERE "
            "finished_at IS NOT NULL GROUP BY submission_id) AS per")).scalar()
    patterns = {"store_failed": "storing the result failed",
                "stored_after_retry": "result stored on try",
                "stored_after_lease_loss": "result stored after the lease was lost",
                "spooled_result_flushed": "storing the result spooled by",
                "already_finished_discarded": "already finished elsewhere",
                "lease_expired_requeued": "lease expired, re-queued"}
    counts = dict.fromkeys(patterns, 0)
    for log in stack.workdir.glob("worker*.log"):
        content = log.read_text(errors="replace")
        for key, pattern in patterns.items():
            counts[key] += content.count(pattern)
    spool = stack.workdir / "spool"
    return DatabaseAudit(
        submissions=submissions, gradings_by_status=by_status,
        gradings_attempted_more_than_once=retried,
        finished_gradings_per_submission_max=finished_max,
        spool_files_left=len(list(spool.glob("*.json"))) if spool.is_dir() else 0,
        worker_log_lines=counts)


# ------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> int:
    """Run the stack, the load and the faults; write the `StackRun` JSON; print its path."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=200)
    parser.add_argument("--uploads-per-student", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--max-duration", type=float, default=1200.0,
                        help="seconds of load (uploads + polling)")
    parser.add_argument("--kill-worker-at", type=float, default=60.0, help="-1: no such fault")
    parser.add_argument("--cut-db-at", type=float, default=180.0, help="-1: no such fault")
    parser.add_argument("--cut-db-s", type=float, default=15.0)
    parser.add_argument("--restart-api-at", type=float, default=300.0, help="-1: no such fault")
    parser.add_argument("--grader-device", default="cpu")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--out-dir", type=Path, default=OUTPUT_DIR)
    parser.add_argument("--keep-database", action="store_true")
    args = parser.parse_args(argv)

    admin_url = os.environ.get("GRADER_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    name = f"loadtest_{stamp.lower()}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'CREATE DATABASE "{name}"'))
    database_url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    direct = create_engine(database_url)
    proxy = CuttableProxy.for_database(database_url)
    workdir = Path(tempfile.mkdtemp(prefix=f"load-{stamp}-"))
    stack = Stack(proxy.url_for(database_url), workdir, _free_port(), args.grader_device)
    faults = Faults(stack, proxy, direct, args)
    print(f"stack in {workdir}; database {name}; API {stack.base_url}", file=sys.stderr)
    started = dt.datetime.now(dt.UTC)
    meta_machine, meta_versions = machine(), versions(direct)
    try:
        stack.start_api()
        for index in range(args.workers):
            stack.start_worker(index)
        config = LoadConfig(server=stack.base_url, students=args.students,
                            uploads_per_student=args.uploads_per_student,
                            concurrency=args.concurrency, max_duration_s=args.max_duration)

        def log(line: str) -> None:
            print(line, file=sys.stderr, flush=True)
            if line.startswith("students created") and faults.t0 is None:
                faults.begin()  # offsets count from the uploads

        load = asyncio.run(run_load(config, instructor_token=INSTRUCTOR_TOKEN, log=log))
        faults.stop.set()
        if faults.thread.is_alive():
            faults.thread.join(timeout=60)
        time.sleep(2)
        result_audit = audit(direct, stack)
    finally:
        faults.stop.set()
        stack.stop_all()
        proxy.close()
        direct.dispose()
        if not args.keep_database:
            with admin.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    notes = []
    if not load.all_finalised:
        notes.append(f"{load.not_finalised} of {load.uploads_accepted} accepted uploads were not "
                     f"finalised within --max-duration {args.max_duration:g} s (queue drain "
                     f"{load.drain_rate_per_min} per minute)")
    run = StackRun(
        date=started, command_line=shlex.join([sys.executable, *sys.argv]),
        machine=meta_machine, versions=meta_versions,
        settings={k: v for k, v in stack.settings.items() if k != "GRADER_DATABASE_URL"}
        | {"workers": str(args.workers), "database": "PostgreSQL through a cuttable TCP proxy"},
        load=load, faults=faults.events, audit=result_audit, notes=notes)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / f"load-{stamp}.json"
    out.write_text(json.dumps(run.model_dump(mode="json"), indent=1) + "\n")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
