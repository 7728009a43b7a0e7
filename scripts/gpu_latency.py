"""Upload to verdict through a running ``grader serve``, one upload at a time (issue 11, point 6).

Used by scripts/gpu_speed.sh on the GPU machine, runnable against any server. One student
uploads FILE ``--uploads`` times, each after the previous one's verdict, so nothing queues:
each figure is one submission's own upload-to-verdict time, measured here from the start of
the POST to the long-poll answer that carries the verdict (``GET /submissions/{id}?wait=60``).
Reads the instructor token from GRADER_INSTRUCTOR_TOKEN; writes ``latency.json`` (every
figure, with each submission as the API returned it) into --out and prints one line per upload.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import httpx
from gpu_e2e import wait_until_healthy  # scripts/ is on sys.path when this file runs

TERMINAL = {"passed", "failed", "error"}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--file", required=True, type=Path)
    parser.add_argument("--uploads", type=int, default=3)
    parser.add_argument("--deadline-s", type=float, default=180.0, help="per upload")
    args = parser.parse_args()
    instructor = {"Authorization": f"Bearer {os.environ['GRADER_INSTRUCTOR_TOKEN']}"}
    client = httpx.Client(base_url=args.server, timeout=90.0)
    wait_until_healthy(client)
    response = client.post("/api/v1/students", json={"name": "latency"}, headers=instructor)
    response.raise_for_status()
    student = {"Authorization": f"Bearer {response.json()['token']}"}
    records = []
    for index in range(args.uploads):
        started = time.monotonic()
        response = client.post("/api/v1/submissions", headers=student,
                               files={"file": ("softmax_backward.py", args.file.read_bytes(), "text/x-python")})
        if response.status_code != 202:
            raise SystemExit(f"upload {index}: {response.status_code} {response.text}")
        accepted = time.monotonic() - started
        submission_id = response.json()["id"]
        body: dict = {}
        while time.monotonic() - started < args.deadline_s:
            body = client.get(f"/api/v1/submissions/{submission_id}", params={"wait": 60}, headers=student).json()
            if body.get("status") in TERMINAL:
                break
        verdict_s = time.monotonic() - started
        result = body.get("result") or {}
        records.append({"upload": index, "id": submission_id, "status": body.get("status"),
                        "upload_accepted_s": accepted, "upload_to_verdict_s": verdict_s,
                        "grading_duration_s": result.get("duration_s"), "timings_s": result.get("timings_s"),
                        "headline": ((result.get("benchmark") or {}).get("headline") or {}).get("value"),
                        "submission": body})
        print(f"upload {index}: {body.get('status')} upload->verdict {verdict_s:.2f} s, grading "
              f"{result.get('duration_s')} s, headline {records[-1]['headline']}", flush=True)
    (args.out / "latency.json").write_text(json.dumps(records, indent=2))
    return 0 if all(r["status"] == "passed" for r in records) else 1


if __name__ == "__main__":
    raise SystemExit(main())
