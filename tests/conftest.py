"""Shared by every suite under tests/. Keep it minimal: each suite owns its own conftest.py.

Nothing here imports torch, triton or the service packages, so every suite can load it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The checkout's root folder (holds pyproject.toml, grader/, api/, tests/)."""
    return REPO_ROOT


def pytest_report_header(config: pytest.Config) -> list[str]:
    # TRITON_INTERPRET belongs inside the grader's sandboxed child, which sets it itself for CPU
    # runs; set for the whole test process it changes how triton behaves in every suite.
    if os.environ.get("TRITON_INTERPRET"):
        return ["WARNING: TRITON_INTERPRET is set for the whole test process; the grader sets it per child"]
    return []
