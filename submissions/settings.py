"""Service settings: the only code in api/ and submissions/ that reads the environment.

One `Settings` object is built once per process (`get_settings()`) and passed down
explicitly; the web app keeps it on `app.state`, the worker receives it as an argument.

Settings come from ``GRADER_*`` environment variables only (no ``.env`` file is read: the
one at the repository root is Docker Compose's, and reading a file from the current
directory would make `grader serve` and `grader students` disagree when started from
different folders). The default database is one file whose location does not depend on the
current directory either (`default_sqlite_path`).
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

#: Values that mark a secret as "not configured". Accepted only in development.
PLACEHOLDER_SECRETS = frozenset({"", "changeme", "secret", "password", "token", "dev", "test"})


def is_placeholder_secret(value: str) -> bool:
    """True for empty values, well-known placeholders and anything containing "change me"
    in any spelling (``CHANGE_ME_INSTRUCTOR_TOKEN``, ``change-me``, ``changeme``)."""
    normalized = value.strip().lower().replace("_", "").replace("-", "").replace(" ", "")
    return normalized in PLACEHOLDER_SECRETS or "changeme" in normalized

#: The checkout this code runs from, when it runs from one (an editable install or
#: PYTHONPATH): the folder holding pyproject.toml and alembic.ini.
REPOSITORY_ROOT = Path(__file__).resolve().parent.parent


def default_sqlite_path() -> Path:
    """Where `grader serve`, `grader worker` and `grader students` keep the SQLite database
    unless ``GRADER_DATABASE_URL`` says otherwise: an absolute path, the same from any
    current directory.

    - In a checkout (`make serve`, ``pip install -e``): ``<checkout>/var/grader.db``.
    - Installed from a wheel: ``$XDG_DATA_HOME/kernel-grader/grader.db`` (default
      ``~/.local/share/kernel-grader/grader.db``).
    """
    if (REPOSITORY_ROOT / "pyproject.toml").is_file() and (REPOSITORY_ROOT / "alembic.ini").is_file():
        return REPOSITORY_ROOT / "var" / "grader.db"
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "kernel-grader" / "grader.db"


def default_database_url() -> str:
    """``sqlite:///`` + `default_sqlite_path()` (an absolute path: four slashes)."""
    return f"sqlite:///{default_sqlite_path().as_posix()}"


def default_grade_command() -> list[str]:
    """The grader invocation prefix; the worker appends the per-job arguments.

    The full command becomes ``[*prefix, SOURCE, "--json", "-", "--seed", SEED, "--device",
    DEVICE, "--benchmark", BENCHMARK]`` (see docs/architecture.md).
    """
    return [sys.executable, "-m", "grader", "check"]


class Settings(BaseSettings):
    """All service configuration, read from ``GRADER_*`` environment variables.

    Raises:
        pydantic.ValidationError: on malformed values, or when ``environment`` is not
            ``development`` and a secret still holds a placeholder value.
    """

    model_config = SettingsConfigDict(env_prefix="GRADER_", extra="ignore", frozen=True)

    environment: Literal["development", "production"] = "development"

    # Database. SQLite (one machine) by default; `postgresql+psycopg://...` for many workers.
    database_url: str = Field(default_factory=default_database_url)
    sqlite_busy_timeout_s: float = Field(30.0, gt=0)

    # Secrets.
    instructor_token: SecretStr = SecretStr("changeme")
    deployment_seed: SecretStr = SecretStr("changeme")

    # The API's request path (docs/reliability.md, "Request path"). Threads and database
    # connections are sized together: the pool has one connection per thread, and at most
    # ``api_threads - api_health_reserve`` requests that need a thread are admitted at once
    # (api/admission.py), so a request that holds a connection never waits for a thread
    # held by a request waiting for a connection. Beyond that a request waits in a bounded
    # queue, on the event loop (no thread, no connection), for up to a target delay; 503 +
    # Retry-After only beyond it (docs/reliability.md, "Admission by queueing delay").
    api_threads: int = Field(24, ge=4, le=512, description="worker threads of the API process "
                             "(anyio's limiter) and database connections of its pool")
    api_health_reserve: int = Field(2, ge=1, description="threads kept for /healthz and "
                                    "/metrics (bounded apart from the API)")
    api_max_waiting: int = Field(2000, ge=0, description="long-polls (GET ...?wait=) waiting "
                                 "at once; they hold no thread or connection while waiting")
    api_retry_after_s: int = Field(1, ge=1, description="Retry-After of an `overloaded` 503")
    api_queue_target_s: float = Field(1.5, gt=0, le=60, description="longest wait (seconds) "
                                      "of a request for a place while the queue has drained "
                                      "within this long (a burst); beyond it, or as soon as "
                                      "the queue's drain rate says it would wait longer, 503 "
                                      "overloaded")
    api_queue_saturated_wait_s: float = Field(0.5, gt=0, le=60, description="longest wait "
                                              "(seconds) for a place once the queue has stayed "
                                              "non-empty for longer than api_queue_target_s "
                                              "(saturation: shed new requests fast); at most "
                                              "api_queue_target_s")
    api_max_queued: int = Field(1000, ge=0, description="requests waiting for a place at once; "
                                "beyond, 503 overloaded at once (0: no queue)")
    long_poll_interval_s: float = Field(0.25, gt=0, description="how often a long-poll rereads "
                                        "the submission's status")
    db_pool_timeout_s: float = Field(5.0, gt=0, description="longest wait for a pooled "
                                     "connection before the request is answered 503")
    max_json_body_bytes: int = Field(64 * 1024, gt=0, description="cap on JSON request bodies")
    # Read deadlines at the edge (api/connections.py, api/guard.py): a client that stops
    # sending holds a connection for at most these, and never a request place.
    api_header_timeout_s: float = Field(10.0, gt=0, le=600, description="a request's headers "
                                        "must arrive within this after the connection opens "
                                        "or the previous answer ends (else 408, closed)")
    api_body_timeout_s: float = Field(30.0, gt=0, le=3600, description="a request's whole body "
                                      "must arrive within this after its headers (else 408, "
                                      "closed); and a client whose answer fills the socket "
                                      "buffers may read nothing for at most this long")
    api_shutdown_timeout_s: float = Field(10.0, gt=0, le=600, description="on SIGTERM, requests "
                                          "still running after this are cancelled (long-polls "
                                          "and body reads end at once)")
    idempotency_ttl_s: float = Field(24 * 3600.0, gt=0, description="how long an "
                                     "Idempotency-Key's first answer is kept")

    # Uploads and rate limit.
    max_upload_bytes: int = Field(256 * 1024, gt=0)
    rate_limit_submissions: int = Field(20, gt=0, description="submissions per window")
    rate_limit_window_s: float = Field(3600.0, gt=0)

    # Queue and worker.
    lease_s: float = Field(60.0, gt=0, description="lease length; renewed by heartbeat")
    heartbeat_interval_s: float | None = Field(
        None, gt=0, description="lease renewal period; default lease_s / 4"
    )
    max_attempts: int = Field(3, ge=1, description="gradings tried before an infrastructure error")
    poll_interval_s: float = Field(0.25, gt=0, description="idle worker's wait between two "
                                   "claims: at most this long from upload to the start of grading")
    worker_stale_after_s: float | None = Field(
        None, gt=0, description="healthz: heartbeat age limit; default 3 heartbeat intervals"
    )
    # Durable results: a finished grading waits in this folder while the database is down.
    worker_spool_dir: Path | None = Field(
        None, description="default: worker-spool/ beside the default SQLite database"
    )
    record_retry_max_s: float = Field(
        10.0, gt=0, description="cap on the backoff between two tries to store a result"
    )
    # Where a worker runs (submissions/placement.py) and how long it lives.
    worker_gpu: str | None = Field(
        None, max_length=100, description="the worker's GPU: an nvidia-smi index or a GPU-... UUID "
        "(sets CUDA_VISIBLE_DEVICES for its graders); default: the host's default GPU")
    worker_cpus: str | None = Field(
        None, max_length=1000, description="host cores of the worker and its graders, as a CPU "
        "list (0-7,16-23); default: every core the worker inherits")
    worker_idle_exit_s: float | None = Field(
        None, gt=0, description="the worker exits after this many seconds without a job (fleet "
        "jobs on a cluster scheduler); default: it waits for jobs until stopped")

    # How a worker runs the grader.
    grade_command: Annotated[list[str], NoDecode] = Field(default_factory=default_grade_command)
    grader_device: str = "auto"
    grader_benchmark: str = "auto"
    grader_timeout_s: float = Field(1800.0, gt=0, description="outer wall-clock limit")
    grader_warm_start: bool = Field(True, description="start the next grader (`--job-on-stdin`) "
                                    "when a grading starts (and when the worker starts), so the "
                                    "next job does not wait for its start-up (Python, torch)")
    max_result_bytes: int = Field(8 * 1024 * 1024, gt=0, description="cap on grader stdout")
    stored_log_cap_bytes: int = Field(64 * 1024, gt=0, description="cap on each stored log text")

    # LTI 1.3 (docs/lms.md): the LMS's roster and grade sync, run by `grader serve`.
    lti_sync_interval_s: float = Field(300.0, ge=0, description="seconds between two runs of "
        "the LMS sync (rosters from NRPS, scores to AGS), each run by the one API process that "
        "holds the sync's lease in the database (submissions/lti/sync.py); 0: none")
    lti_roster_interval_s: float = Field(6 * 3600.0, gt=0, description="seconds between two "
        "roster syncs of one LMS course")
    lti_http_timeout_s: float = Field(10.0, gt=0, description="each request to an LMS")
    lti_retry_first_s: float = Field(60.0, gt=0, description="first pause before a failed "
        "score push is retried; it doubles on each failure")
    lti_retry_max_s: float = Field(6 * 3600.0, gt=0, description="longest pause between two "
        "attempts of a failed score push")
    lti_key_grace_s: float = Field(7 * 24 * 3600.0, gt=0, description="how long a rotated-out "
        "tool key stays in the published JWKS")

    @field_validator("grade_command", mode="before")
    @classmethod
    def _parse_grade_command(cls, value: object) -> object:
        """Accept a JSON list (``'["python", "fake.py"]'``) or a shell-like string."""
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return shlex.split(text)
        return value

    @field_validator("deployment_seed", "instructor_token", mode="before")
    @classmethod
    def _secret_as_text(cls, value: object) -> object:
        """An integer seed is accepted and used as its decimal text."""
        return str(value) if isinstance(value, int) else value

    @field_validator("worker_cpus")
    @classmethod
    def _cpu_list(cls, value: str | None) -> str | None:
        if value is not None:
            from submissions.placement import parse_cpu_list

            parse_cpu_list(value)  # ValueError: a validation error naming GRADER_WORKER_CPUS
        return value

    @field_validator("grade_command")
    @classmethod
    def _non_empty_command(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("grade_command must not be empty")
        return value

    @model_validator(mode="after")
    def _refuse_placeholder_secrets(self) -> Settings:
        if self.environment == "development":
            return self
        for field_name in ("instructor_token", "deployment_seed"):
            if is_placeholder_secret(getattr(self, field_name).get_secret_value()):
                raise ValueError(
                    f"GRADER_{field_name.upper()} holds a placeholder; set a real secret "
                    f"(placeholders are accepted only with GRADER_ENVIRONMENT=development)"
                )
        if len(self.instructor_token.get_secret_value()) < 16:
            raise ValueError("GRADER_INSTRUCTOR_TOKEN must be at least 16 characters")
        return self

    @property
    def lease_renewal_s(self) -> float:
        """Seconds between two lease renewals by a worker's heartbeat thread."""
        return self.heartbeat_interval_s or self.lease_s / 4

    @property
    def api_max_in_flight(self) -> int:
        """Requests needing a thread (and so perhaps a connection) admitted at once."""
        return max(1, self.api_threads - self.api_health_reserve)

    @property
    def worker_stale_after(self) -> float:
        """Seconds after its last heartbeat at which /healthz reports a worker dead:
        ``worker_stale_after_s`` if set, else 3 heartbeat intervals (`lease_renewal_s`)."""
        return self.worker_stale_after_s or 3 * self.lease_renewal_s

    @property
    def result_spool_dir(self) -> Path:
        """Where a worker keeps finished gradings until they are stored:
        ``worker_spool_dir`` if set, else ``worker-spool/`` beside `default_sqlite_path()`."""
        return self.worker_spool_dir or default_sqlite_path().parent / "worker-spool"

    @property
    def is_sqlite(self) -> bool:
        """True when the database is SQLite (one machine; WAL mode)."""
        return self.database_url.startswith("sqlite")


@functools.cache
def get_settings() -> Settings:
    """The process-wide settings, built on first use from the environment."""
    return Settings()
