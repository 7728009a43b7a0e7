"""The worker's result spool: a finished grading is written to a local file before the
worker tries to store it, and the file is deleted once the database has it.

A grading that finishes while the database is unreachable therefore survives the worker
being stopped or killed: the next worker started on the same host (same spool folder,
same database) stores the spooled results before it claims anything
(`Worker.flush_spool`). Storing is fenced in the database (see
`repository.store_finished_grading`), so a spooled result is stored at most once even if
two workers flush the same file.

Files are written atomically (temporary file, fsync, rename, fsync of the folder); one
file per claim, named ``<grading id>-<lease token>.json``.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError
from sqlalchemy.engine import make_url

from submissions.grading import GradingOutcome

logger = logging.getLogger("submissions.spool")

__all__ = ["ResultSpool", "SpooledResult", "database_identity"]


def database_identity(database_url: str) -> str:
    """The database a spooled result belongs to: its URL without the password."""
    return make_url(database_url).render_as_string(hide_password=True)


class SpooledResult(BaseModel):
    """One finished grading waiting to be stored (the spool file's one definition: written
    by one worker process, read by it or by a later one)."""

    model_config = ConfigDict(frozen=True, ser_json_inf_nan="constants")

    format: Literal[1] = 1
    #: `database_identity` of the database the grading was claimed from.
    database: str
    worker_id: str
    grading_id: int
    submission_id: int
    lease_token: str
    #: The claim's attempt number (``gradings.attempts`` after the claim).
    attempt: int
    #: When the grader finished (aware UTC); stored as the grading's ``finished_at``.
    finished_at: dt.datetime
    outcome: GradingOutcome


class ResultSpool:
    """The spool folder of one database on this host.

    Raises:
        OSError: from `put` when the file cannot be written (the caller still tries the
            database; only durability across a worker's death is lost).
    """

    def __init__(self, directory: Path, *, database_url: str) -> None:
        self.directory = directory
        self.database = database_identity(database_url)

    def path_for(self, result: SpooledResult) -> Path:
        """The file that holds `result`."""
        return self.directory / f"{result.grading_id}-{result.lease_token}.json"

    def put(self, result: SpooledResult) -> Path:
        """Write `result` durably (fsynced before this returns); returns its path."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path_for(result)
        temporary = path.with_suffix(f".tmp{os.getpid()}")
        data = result.model_dump_json().encode("utf-8")
        with temporary.open("wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
        directory_fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(directory_fd)
        finally:
            os.close(directory_fd)
        return path

    def remove(self, result: SpooledResult) -> None:
        """Delete the file of `result` (missing is fine: another worker flushed it)."""
        self.path_for(result).unlink(missing_ok=True)

    def pending(self) -> list[SpooledResult]:
        """Spooled results of this database, oldest first. Files of other databases are
        left alone; a file that does not parse is renamed ``*.bad`` and logged."""
        if not self.directory.is_dir():
            return []
        results: list[tuple[float, SpooledResult]] = []
        for path in self.directory.glob("*.json"):
            try:
                result = SpooledResult.model_validate_json(path.read_bytes())
                mtime = path.stat().st_mtime
            except FileNotFoundError:
                continue  # flushed meanwhile by another worker
            except (OSError, ValidationError) as exc:
                logger.error("spooled result %s is unreadable (%s); renamed *.bad", path, exc)
                path.replace(path.with_suffix(".bad"))
                continue
            if result.database == self.database:
                results.append((mtime, result))
        return [result for _mtime, result in sorted(results, key=lambda item: item[0])]
