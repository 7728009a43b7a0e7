"""Unique student names: service, repository, database constraint and `grader students`."""

from __future__ import annotations

import datetime as dt

import pytest
from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError

from submissions import cli, repository, service
from submissions.errors import StudentNameInvalid, StudentNameTaken
from submissions.models import Student

from ..helpers import INSTRUCTOR_TOKEN

NOW = dt.datetime(2026, 11, 29, 12, 0, tzinfo=dt.UTC)


def test_name_key_is_trimmed_and_case_folded() -> None:
    assert service.student_name_key("  Alice\t") == "alice"
    assert service.student_name_key("STRASSE") == service.student_name_key("Straße")


def test_service_refuses_a_taken_name_and_the_session_stays_usable(db_session) -> None:
    first = service.create_student(db_session, name="Alice", now=NOW).student
    with pytest.raises(StudentNameTaken) as raised:
        service.create_student(db_session, name=" ALICE ", now=NOW)
    assert raised.value.code == "student_name_taken" and raised.value.http_status == 409
    assert raised.value.details == {"student_id": first.id}
    service.create_student(db_session, name="Bob", now=NOW)
    assert [s.name for s in repository.list_students(db_session)] == ["Alice", "Bob"]


@pytest.mark.parametrize("name", ["", "   ", "x" * 201])
def test_service_refuses_blank_or_long_names(db_session, name) -> None:
    with pytest.raises(StudentNameInvalid) as raised:
        service.create_student(db_session, name=name, now=NOW)
    assert raised.value.code == "student_name_invalid"


def test_repository_insert_reports_a_conflict_as_none(db_session) -> None:
    """What a concurrent insert of the same name sees: the unique index decides."""
    assert repository.insert_student(db_session, name="a", name_key="a", token_sha256="1" * 64,
                                     now=NOW) is not None
    assert repository.insert_student(db_session, name="A", name_key="a", token_sha256="2" * 64,
                                     now=NOW) is None
    assert [s.token_sha256 for s in db_session.scalars(select(Student))] == ["1" * 64]


def test_the_database_enforces_unique_names(db_session) -> None:
    service.create_student(db_session, name="alice", now=NOW)
    db_session.commit()
    with pytest.raises(IntegrityError, match="name_key"):
        db_session.execute(insert(Student).values(
            name="Alice", name_key="alice", token_sha256="f" * 64, created_at=NOW))
    db_session.rollback()


def test_cli_students_add_refuses_a_duplicate_with_exit_2(
    committed_db, monkeypatch, tmp_path, capsys
) -> None:
    monkeypatch.chdir(tmp_path)  # no .env
    monkeypatch.setenv("GRADER_DATABASE_URL", committed_db.url)
    monkeypatch.setenv("GRADER_INSTRUCTOR_TOKEN", INSTRUCTOR_TOKEN)
    monkeypatch.setenv("GRADER_DEPLOYMENT_SEED", "test-deployment-seed")
    assert cli.students(["add", "alice"]) == cli.EXIT_OK
    capsys.readouterr()

    assert cli.students(["add", " Alice "]) == cli.EXIT_ERROR
    captured = capsys.readouterr()
    assert captured.out == ""  # no token printed
    assert "student_name_taken" in captured.err and "'alice' already exists" in captured.err

    assert cli.students(["add", "   "]) == cli.EXIT_ERROR
    assert "student_name_invalid" in capsys.readouterr().err

    assert cli.students(["list"]) == cli.EXIT_OK
    listed = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[1] for line in listed] == ["alice"]


def test_concurrent_creations_of_one_name_create_one_student(committed_db) -> None:
    import threading

    count = 8
    start = threading.Barrier(count)
    outcomes: list[str] = []
    lock = threading.Lock()

    def create(index: int) -> None:
        start.wait()
        try:
            with committed_db.session_factory.begin() as session:
                service.create_student(session, name=" Alice" if index % 2 else "alice", now=NOW)
            outcome = "created"
        except StudentNameTaken:
            outcome = "taken"
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome = repr(exc)
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["created"] + ["taken"] * (count - 1)
    with committed_db.session_factory() as session:
        assert len(repository.list_students(session)) == 1
