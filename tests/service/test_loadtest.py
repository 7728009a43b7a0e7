"""scripts/loadtest.py against a real `grader serve` (SQLite, one embedded worker, the fake
grader): every accepted upload is finalised, nothing is stored twice, no 500; and the pure
helpers (loopback guard, surplus count, long-poll detection)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from .helpers import FAKE_GRADER, INSTRUCTOR_TOKEN
from .test_end_to_end import _environment, grader_serve

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "loadtest.py"


def _loadtest():
    spec = importlib.util.spec_from_file_location("loadtest", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["loadtest"] = module
    spec.loader.exec_module(module)
    return module


def test_the_load_tool_targets_loopback_only() -> None:
    loadtest = _loadtest()
    loadtest.require_loopback("http://127.0.0.1:8000")
    loadtest.require_loopback("http://localhost:8000")
    for server in ("http://10.0.0.5:8000", "http://example.org", "https://127.0.0.1:8000"):
        with pytest.raises(ValueError):
            loadtest.require_loopback(server)


def test_surplus_counts_unacknowledged_submissions_of_every_student() -> None:
    loadtest = _loadtest()
    stored = {1: [10, 11], 2: [12, 13, 14], 3: [15]}
    acknowledged = {1: [10, 11], 2: [12]}
    assert loadtest.surplus_by_student(stored, acknowledged) == {2: 2, 3: 1}


def test_long_poll_is_detected_from_the_openapi_document() -> None:
    loadtest = _loadtest()
    path = "/api/v1/submissions/{submission_id}"
    with_wait = {"paths": {path: {"get": {"parameters": [{"name": "wait", "in": "query"}]}}}}
    without = {"paths": {path: {"get": {"parameters": []}}}}
    assert loadtest.server_has_long_poll(with_wait) and not loadtest.server_has_long_poll(without)


@pytest.mark.slow
def test_a_small_load_is_finalised_once_without_server_errors(tmp_path: Path) -> None:
    loadtest = _loadtest()
    env = _environment(grade_command=json.dumps([sys.executable, str(FAKE_GRADER)]),
                       poll_interval_s="0.1", worker_spool_dir=str(tmp_path / "spool"))
    with grader_serve(tmp_path, env) as base_url:
        config = loadtest.LoadConfig(server=base_url, students=4, uploads_per_student=2,
                                     concurrency=8, poll_interval_s=0.2, max_duration_s=120)
        result = asyncio.run(loadtest.run_load(config, instructor_token=INSTRUCTOR_TOKEN,
                                               log=lambda _line: None))
    assert (result.students_created, result.uploads_accepted, result.finalised) == (4, 8, 8)
    assert result.all_finalised and result.server_errors_5xx == 0
    assert result.duplicates.surplus == 0 and result.duplicates.submissions_on_server == 8
    assert result.routes["POST /api/v1/submissions"].statuses == {"202": 8}
    assert result.recovery_s is not None and result.recovery_s < 5
    json.loads(result.model_dump_json())  # the recorded form round-trips
