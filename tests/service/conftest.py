"""Fixtures for the service tests (api/, submissions/, alembic/).

Every test that touches a database runs twice: on SQLite and on the PostgreSQL server at
``GRADER_TEST_POSTGRES_URL`` (default ``postgresql+psycopg://postgres@127.0.0.1:5432/postgres``;
the PostgreSQL runs fail, with the fix, when it is unreachable: `make test` starts it).

Databases are built only by running the Alembic migrations:
- per session and backend, one migrated *template* (SQLite: a file; PostgreSQL: a database
  ``grader_test_<random>_tpl``, dropped at the end);
- `db_connection`: API tests get a copy of it and one outer transaction per test, rolled back;
- `committed_db`: queue/worker tests (other threads and processes must see the data) get a
  fresh copy per test (file copy / ``CREATE DATABASE ... TEMPLATE``), dropped afterwards.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi import Request
from fastapi.testclient import TestClient
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from api.deps import REQUEST_FAILED, get_db_session, session_scope
from api.main import create_app
from submissions.db import create_db_engine, create_session_factory
from submissions.migrations import upgrade_to_head
from submissions.settings import Settings

from .helpers import CommittedDatabase, make_settings, postgres_admin_url

# ------------------------------------------------------------------------ databases


@dataclass
class DatabaseServer:
    """Creates and drops test databases for one backend."""

    backend: str
    workdir: Path
    admin_engine: Engine | None = None  # PostgreSQL only (AUTOCOMMIT)
    template: str = ""

    def url_for(self, name: str) -> str:
        if self.backend == "sqlite":
            return f"sqlite:///{self.workdir / name}.db"
        return make_url(postgres_admin_url()).set(database=name).render_as_string(
            hide_password=False
        )

    def create_template(self) -> None:
        self.template = f"grader_test_{uuid.uuid4().hex[:10]}_tpl"
        if self.backend == "postgres":
            self._execute(f'CREATE DATABASE "{self.template}"')
        url = self.url_for(self.template)
        upgrade_to_head(database_url=url)

    def create_copy(self) -> str:
        """A fresh migrated database (copy of the template); returns its URL."""
        name = f"grader_test_{uuid.uuid4().hex[:10]}"
        if self.backend == "sqlite":
            shutil.copyfile(self.workdir / f"{self.template}.db", self.workdir / f"{name}.db")
        else:
            self._execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        return self.url_for(name)

    def drop(self, url: str) -> None:
        if self.backend == "sqlite":
            for suffix in ("", "-wal", "-shm"):
                Path(make_url(url).database + suffix).unlink(missing_ok=True)
        else:
            self._execute(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)')

    def _execute(self, statement: str) -> None:
        assert self.admin_engine is not None
        with self.admin_engine.connect() as connection:
            connection.execute(text(statement))


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def database_server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                    ) -> Iterator[DatabaseServer]:
    backend = request.param
    server = DatabaseServer(backend=backend, workdir=tmp_path_factory.mktemp(f"db-{backend}"))
    if backend == "postgres":
        engine = create_engine(postgres_admin_url(), isolation_level="AUTOCOMMIT")
        try:
            with engine.connect():
                pass
        except OperationalError as exc:
            engine.dispose()
            # `make test` starts the default server (scripts/test_setup.sh): never a skip.
            pytest.fail(f"PostgreSQL unreachable at {postgres_admin_url()}: {exc.orig}; `make test` "
                        "starts an installed one (scripts/test_setup.sh), or set GRADER_TEST_POSTGRES_URL")
        server.admin_engine = engine
    server.create_template()
    yield server
    if backend == "postgres":
        server.drop(server.url_for(server.template))
        assert server.admin_engine is not None
        server.admin_engine.dispose()


@pytest.fixture(scope="session")
def rollback_database(database_server: DatabaseServer) -> Iterator[tuple[str, Engine]]:
    """One migrated database per backend for the rolled-back API tests."""
    url = database_server.create_copy()
    engine = create_db_engine(url)
    yield url, engine
    engine.dispose()
    database_server.drop(url)


@pytest.fixture
def db_connection(rollback_database: tuple[str, Engine]) -> Iterator[Connection]:
    """A connection inside an outer transaction that is rolled back after the test."""
    _url, engine = rollback_database
    connection = engine.connect()
    outer = connection.begin()
    yield connection
    outer.rollback()
    connection.close()


@pytest.fixture
def session_factory(db_connection: Connection) -> sessionmaker[Session]:
    """Sessions joined to the test's outer transaction (their commits become savepoints)."""
    return sessionmaker(
        bind=db_connection, join_transaction_mode="create_savepoint", expire_on_commit=False
    )


@pytest.fixture
def db_session(session_factory: sessionmaker[Session]) -> Iterator[Session]:
    with session_factory() as session:
        yield session


@pytest.fixture
def settings(rollback_database: tuple[str, Engine]) -> Settings:
    return make_settings(rollback_database[0])


@pytest.fixture
def app_factory(session_factory: sessionmaker[Session]) -> Callable[..., TestClient]:
    """Build a TestClient whose app uses the rolled-back test session (settings overridable)."""
    clients: list[TestClient] = []

    def build(settings: Settings) -> TestClient:
        app = create_app(settings)

        def override_session(request: Request) -> Iterator[Session]:
            yield from session_scope(session_factory, failed=lambda: bool(request.scope.get(REQUEST_FAILED)))

        app.dependency_overrides[get_db_session] = override_session
        # The middleware (token before body) and the long-poll open their own sessions.
        app.state.session_factory = session_factory
        client = TestClient(app)
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.close()


@pytest.fixture
def client(app_factory: Callable[..., TestClient], settings: Settings) -> TestClient:
    return app_factory(settings)


@pytest.fixture
def committed_db(database_server: DatabaseServer) -> Iterator[CommittedDatabase]:
    url = database_server.create_copy()
    engine = create_db_engine(url)
    yield CommittedDatabase(url, database_server.backend, engine, create_session_factory(engine))
    engine.dispose()
    database_server.drop(url)




@pytest.fixture(autouse=True)
def _no_service_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests build their Settings explicitly; a developer's GRADER_* variables must not leak in."""
    from submissions.grading import service_env_var_names

    for name in service_env_var_names():
        monkeypatch.delenv(name, raising=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the PostgreSQL variants so that ``-m "not postgres"`` can leave them out."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("database_server") == "postgres":
            item.add_marker(pytest.mark.postgres)
