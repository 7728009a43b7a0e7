"""submissions/settings.py and the seed derivation."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from submissions.service import derive_grading_seed
from submissions.settings import Settings


def test_placeholder_secrets_are_refused_outside_development(monkeypatch) -> None:
    monkeypatch.setenv("GRADER_ENVIRONMENT", "production")
    monkeypatch.setenv("GRADER_INSTRUCTOR_TOKEN", "CHANGE_ME_INSTRUCTOR_TOKEN")
    monkeypatch.setenv("GRADER_DEPLOYMENT_SEED", "12345")
    with pytest.raises(ValidationError, match="placeholder"):
        Settings(_env_file=None)
    monkeypatch.setenv("GRADER_INSTRUCTOR_TOKEN", "a-real-and-long-instructor-token")
    monkeypatch.setenv("GRADER_DEPLOYMENT_SEED", "changeme")
    with pytest.raises(ValidationError, match="placeholder"):
        Settings(_env_file=None)
    monkeypatch.setenv("GRADER_DEPLOYMENT_SEED", "987654321")
    settings = Settings(_env_file=None)
    assert settings.deployment_seed.get_secret_value() == "987654321"
    assert "a-real" not in repr(settings)  # secrets never appear in reprs or logs


def test_development_accepts_placeholders() -> None:
    assert Settings(_env_file=None, environment="development").environment == "development"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('["python3", "/opt/fake grader.py"]', ["python3", "/opt/fake grader.py"]),
        ("python3 '/opt/fake grader.py' --x", ["python3", "/opt/fake grader.py", "--x"]),
    ],
)
def test_grade_command_from_json_or_shell_words(monkeypatch, raw, expected) -> None:
    monkeypatch.setenv("GRADER_GRADE_COMMAND", raw)
    assert Settings(_env_file=None).grade_command == expected


def test_default_grade_command_and_database(monkeypatch, tmp_path) -> None:
    settings = Settings(_env_file=None)
    assert settings.grade_command == [sys.executable, "-m", "grader", "check"]
    assert settings.max_upload_bytes == 256 * 1024
    # One database for `grader serve`, `grader worker` and `grader students`, whatever the
    # current directory: the checkout's var/grader.db, as an absolute path.
    checkout = Path(__file__).resolve().parents[2]
    assert settings.database_url == f"sqlite:///{checkout}/var/grader.db"
    monkeypatch.chdir(tmp_path)
    assert Settings(_env_file=None).database_url == settings.database_url


def test_default_database_outside_a_checkout_is_in_the_xdg_data_dir(monkeypatch, tmp_path) -> None:
    import submissions.settings as settings_module

    monkeypatch.setattr(settings_module, "REPOSITORY_ROOT", tmp_path / "site-packages")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert Settings().database_url == f"sqlite:///{tmp_path}/data/kernel-grader/grader.db"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert Settings().database_url == (
        f"sqlite:///{tmp_path}/home/.local/share/kernel-grader/grader.db")


def test_no_env_file_is_read_from_the_current_directory(monkeypatch, tmp_path) -> None:
    (tmp_path / ".env").write_text("GRADER_DATABASE_URL=postgresql+psycopg://x@db/grader\n")
    monkeypatch.chdir(tmp_path)
    assert Settings().database_url.startswith("sqlite:///")


def test_seed_is_derived_from_the_deployment_secret_and_the_submission() -> None:
    seed = derive_grading_seed(deployment_seed="s3cret", submission_id=42)
    digest = hashlib.sha256(b"s3cret:42").digest()
    assert seed == int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)
    assert seed == derive_grading_seed(deployment_seed="s3cret", submission_id=42)
    assert seed != derive_grading_seed(deployment_seed="s3cret", submission_id=43)
    assert seed != derive_grading_seed(deployment_seed="other", submission_id=42)
    assert 0 <= seed < 2**63
