"""``grader serve``: migrate the database, start embedded grading workers, run the API.

Dispatched by `grader` (grader/cli.py); also ``python -m api.cli --port 8000``.
"""

from __future__ import annotations

import argparse
import gc
import ipaddress
import logging
import signal
import subprocess
import sys
import threading
import time
from typing import Any

logger = logging.getLogger("api.cli")

EXIT_OK = 0


def _configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s [%(process)d] %(message)s",
    )
    logging.getLogger("alembic").setLevel(logging.WARNING)


class EmbeddedWorkers:
    """Child worker processes of `grader serve`, restarted if they die.

    Child processes (not threads) so that a worker's crash, or a stuck grading, can never
    block the web server's event loop; each child gets SIGTERM if `serve` dies.
    """

    def __init__(self, count: int, placements: list | None = None) -> None:
        self.count = count
        #: submissions.placement.WorkerPlacement of each worker (its GPU and host cores).
        self.placements = placements or [None] * count
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * count
        self._stopping = threading.Event()
        self._supervisor = threading.Thread(target=self._supervise, name="worker-supervisor",
                                            daemon=True)

    def _spawn(self, index: int) -> subprocess.Popen[bytes]:
        from submissions.grading import parent_death_signal_setter
        from submissions.placement import format_cpu_list

        command = [sys.executable, "-m", "submissions.cli", "worker"]
        placement = self.placements[index]
        if placement is not None and placement.gpu is not None:
            command += ["--gpu", placement.gpu]
        if placement is not None and placement.cpus is not None:
            command += ["--cpus", format_cpu_list(placement.cpus)]
        logger.info("starting embedded worker %d%s", index, f" ({' '.join(command[4:])})" if command[4:] else "")
        return subprocess.Popen(  # noqa: S603
            command, stdin=subprocess.DEVNULL,
            preexec_fn=parent_death_signal_setter(signal.SIGTERM),  # noqa: PLW1509
        )

    def start(self) -> None:
        if self.count > 0:
            self._supervisor.start()

    def _supervise(self) -> None:
        # Spawning happens in this thread, which lives until the children are stopped
        # (Linux delivers the parent-death signal when the *spawning thread* exits).
        backoff = 1.0
        while not self._stopping.is_set():
            for index, process in enumerate(self.processes):
                if process is None or process.poll() is not None:
                    if process is not None:
                        logger.warning("embedded worker %d exited with %s; restarting in %.0f s",
                                       index, process.returncode, backoff)
                        if self._stopping.wait(backoff):
                            break
                        backoff = min(backoff * 2, 30.0)
                    self.processes[index] = self._spawn(index)
            self._stopping.wait(1.0)
        for process in self.processes:
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for process in self.processes:
            if process is None:
                continue
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def stop(self) -> None:
        """Stop the children (SIGTERM; SIGKILL after 15 s) and wait for them."""
        self._stopping.set()
        if self._supervisor.is_alive():
            self._supervisor.join()


def is_loopback(host: str) -> bool:
    """True when `host` accepts connections from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str, environment: str) -> str | None:
    """The banner printed when development settings listen beyond loopback (placeholder
    tokens accepted, from any machine that reaches the port), else None."""
    if environment != "development" or is_loopback(host):
        return None
    line = "!" * 78
    return (
        f"{line}\n"
        f"WARNING: development mode is listening on {host}, beyond this machine.\n"
        "Development accepts placeholder secrets: unless GRADER_INSTRUCTOR_TOKEN is set, the\n"
        "instructor token is 'changeme', so anyone who reaches this port can act as the\n"
        "instructor (read every submission, change deadlines, export grades).\n"
        "Use --host 127.0.0.1, or run with GRADER_ENVIRONMENT=production and real secrets\n"
        "(docs/deployment.md).\n"
        f"{line}"
    )


def _embedded_worker_count(requested: int, settings: Any) -> int:
    """``requested``, or 0 when the grader could not sandbox anything here (no working bwrap:
    submissions/grading.py ``grading_sandbox_problem``), said loudly with the fix: uploads
    then wait in the queue for a worker that can grade them, instead of each ending in error."""
    if requested <= 0:
        return requested
    from submissions.grading import grading_sandbox_problem

    problem = grading_sandbox_problem(settings)
    if problem is None:
        return requested
    logger.error("no embedded worker started: every grading would end as an infrastructure error. %s "
                 "Uploads are accepted and wait in the queue until a worker with a working sandbox runs.",
                 problem)
    return 0


def serve(argv: list[str]) -> int:
    """`grader serve`: migrate, start embedded workers, run the API with uvicorn."""
    parser = argparse.ArgumentParser(prog="grader serve", description=serve.__doc__)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--workers-embedded", type=int, default=1, metavar="N",
                        help="worker processes to run beside the API (default 1; 0 for none)")
    parser.add_argument("--gpus", metavar="LIST",
                        help="one GPU per embedded worker (nvidia-smi indices or UUIDs, e.g. 0,1); "
                             "each worker also gets a disjoint share of the host cores")
    parser.add_argument("--log-level", default="info")
    args = parser.parse_args(argv)
    _configure_logging()

    from api.main import create_app
    from submissions.migrations import upgrade_to_head
    from submissions.settings import get_settings

    settings = get_settings()
    warning = exposure_warning(args.host, settings.environment)
    if warning:
        print(warning, file=sys.stderr, flush=True)
    upgrade_to_head(database_url=settings.database_url)
    logger.info("database migrated: %s", _redacted(settings.database_url))
    if settings.environment == "development" and \
            settings.instructor_token.get_secret_value() == "changeme":
        logger.info("development mode: the instructor token is 'changeme' "
                    "(set GRADER_INSTRUCTOR_TOKEN to change it)")
    from submissions.placement import embedded_placements

    try:
        gpus = [gpu.strip() for gpu in args.gpus.split(",")] if args.gpus else None
        placements = embedded_placements(args.workers_embedded, gpus)
    except ValueError as exc:
        parser.error(str(exc))
    count = _embedded_worker_count(args.workers_embedded, settings)
    workers = EmbeddedWorkers(count, placements[:count])
    received: list[int] = []

    def _remember_signal(signum: int, _frame: Any) -> None:
        received.append(signum)

    # uvicorn handles SIGTERM/SIGINT itself, then re-raises the signal through the handler
    # that was installed before it started: this one, so the workers are still stopped.
    signal.signal(signal.SIGTERM, _remember_signal)
    signal.signal(signal.SIGINT, _remember_signal)
    workers.start()
    try:
        _api_server(_uvicorn_config(create_app(settings), settings, host=args.host,
                                    port=args.port, log_level=args.log_level)).run()
    finally:
        workers.stop()
    logger.info("grader serve stopped%s",
                f" ({signal.Signals(received[0]).name})" if received else "")
    # The interpreter's last garbage collection over everything the app built took 1.5-5 s
    # (measured on the 2-core dev machine), the port closed all along and a restart waiting:
    # nothing of it needs collecting now, so leave it to the exit.
    gc.freeze()
    return EXIT_OK


def _uvicorn_config(app: Any, settings: Any, *, host: str, port: int, log_level: str) -> Any:
    """uvicorn's settings for the API: h11 with a header deadline and a deadline for clients
    that read nothing of their answer (api/connections.py),
    uvicorn's 5 s keep-alive, and requests still running ``api_shutdown_timeout_s`` after a
    SIGTERM cancelled (long-polls and body reads end at once: `api.main.begin_shutdown`)."""
    import uvicorn

    from api.connections import header_deadline_protocol

    return uvicorn.Config(
        app, host=host, port=port, log_level=log_level,
        http=header_deadline_protocol(settings.api_header_timeout_s,
                                      write_timeout_s=settings.api_body_timeout_s),
        timeout_keep_alive=5,
        timeout_graceful_shutdown=max(1, round(settings.api_shutdown_timeout_s)))


def _api_server(config: Any) -> Any:
    """A uvicorn server that, on SIGTERM or SIGINT, first releases the app's long-polls and
    body reads (`api.main.begin_shutdown`, on the event loop), then shuts down as uvicorn
    does: stop accepting, finish the requests under way, exit."""
    import uvicorn

    from api.main import begin_shutdown

    class ApiServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            app = config.app
            loop = getattr(app.state, "loop", None)
            if loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(begin_shutdown, app)
            super().handle_exit(sig, frame)

    return ApiServer(config)


def _redacted(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:]))
