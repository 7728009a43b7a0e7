"""Drive a running ``grader serve`` over HTTP: two students, six uploads, wait, record.

Used by scripts/gpu_e2e.sh on the GPU machine (and runnable against any server). Reads the
instructor token from GRADER_INSTRUCTOR_TOKEN. Writes submissions.json, leaderboard.json,
leaderboard.csv and timings.json into --out, and prints a short table last.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent

# (student, label, file): the reference, a fast-but-different correct kernel, two wrong
# kernels and two hostile files.
UPLOADS = [
    ("alice", "reference", REPO / "grader/assignments/softmax_backward/reference.py"),
    ("bob", "correct_rowblock", REPO / "tests/corpus/softmax_backward/correct/rowblock_split2d.py"),
    ("alice", "wrong_sum_g", REPO / "tests/corpus/softmax_backward/wrong/sum_g_instead_of_dot.py"),
    ("bob", "wrong_flipped_sign", REPO / "tests/corpus/softmax_backward/wrong/flipped_sign.py"),
    ("bob", "hostile_timeout", REPO / "scripts/e2e_files/hostile_timeout.py"),
    ("alice", "hostile_env_leak", REPO / "scripts/e2e_files/hostile_env_leak.py"),
]
FINAL = {"passed", "failed", "error"}


def wait_until_healthy(client: httpx.Client, *, attempts: int = 240, pause_s: float = 0.5) -> None:
    """Poll ``/healthz`` until it answers 200 (the server migrates, then starts listening).

    Raises:
        SystemExit: it never did, after ``attempts`` tries ``pause_s`` apart.
    """
    for _ in range(attempts):
        try:
            if client.get("/healthz").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(pause_s)
    raise SystemExit("server did not become healthy")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--sandbox", default="bubblewrap")
    parser.add_argument("--deadline-s", type=float, default=480.0)
    args = parser.parse_args()
    instructor = {"Authorization": f"Bearer {os.environ['GRADER_INSTRUCTOR_TOKEN']}"}
    client = httpx.Client(base_url=args.server, timeout=30.0)

    wait_until_healthy(client)

    tokens = {}
    for name in sorted({student for student, _, _ in UPLOADS}):
        response = client.post("/api/v1/students", json={"name": name}, headers=instructor)
        response.raise_for_status()
        tokens[name] = response.json()["token"]

    uploaded = []
    for student, label, path in UPLOADS:
        headers = {"Authorization": f"Bearer {tokens[student]}"}
        response = client.post(
            "/api/v1/submissions",
            files={"file": ("softmax_backward.py", path.read_bytes(), "text/x-python")},
            headers=headers,
        )
        if response.status_code != 202:
            raise SystemExit(f"upload {label}: {response.status_code} {response.text}")
        uploaded.append({"label": label, "student": student, "file": str(path.relative_to(REPO)),
                         "id": response.json()["id"], "uploaded_at": time.monotonic()})

    records = {}
    deadline = time.monotonic() + args.deadline_s
    while len(records) < len(uploaded) and time.monotonic() < deadline:
        for item in uploaded:
            if item["id"] in records:
                continue
            response = client.get(f"/api/v1/submissions/{item['id']}", headers=instructor)
            body = response.json()
            if body.get("status") in FINAL:
                records[item["id"]] = {**item, "upload_to_verdict_s": time.monotonic() - item["uploaded_at"], "submission": body}
        time.sleep(0.5)

    submissions = []
    for item in uploaded:
        record = records.get(item["id"], {**item, "upload_to_verdict_s": None, "submission": None})
        record.pop("uploaded_at", None)
        submissions.append(record)
    (args.out / "submissions.json").write_text(json.dumps(submissions, indent=2))
    leaderboard = client.get("/api/v1/leaderboard", headers=instructor)
    (args.out / "leaderboard.json").write_text(json.dumps(leaderboard.json(), indent=2))
    csv = client.get("/api/v1/leaderboard", params={"format": "csv"}, headers=instructor)
    (args.out / "leaderboard.csv").write_text(csv.text)

    canary = os.environ.get("GRADER_SECRET_FOR_LEAK_TEST", "")
    everything = json.dumps(submissions)
    leaks = [secret for secret in (canary, os.environ["GRADER_INSTRUCTOR_TOKEN"], os.environ.get("GRADER_DEPLOYMENT_SEED", ""))
             if secret and secret in everything]
    (args.out / "timings.json").write_text(json.dumps(
        {"sandbox": args.sandbox, "secrets_found_in_results": len(leaks),
         "upload_to_verdict_s": {s["label"]: s["upload_to_verdict_s"] for s in submissions}}, indent=2))

    print(f"{'label':20} {'status':8} {'s':>7}  failed checks / error / headline")
    for record in submissions:
        body = record["submission"] or {}
        result = body.get("result") or {}
        failed = [c["name"] for c in result.get("checks", []) if not c.get("passed")]
        error = (result.get("error") or body.get("error") or {})
        bench = (result.get("benchmark") or {}).get("headline") or {}
        seconds = record["upload_to_verdict_s"]
        print(f"{record['label']:20} {body.get('status', 'TIMEOUT'):8} {seconds if seconds is None else round(seconds, 1):>7}  "
              f"{failed or ''} {error.get('kind', '') if isinstance(error, dict) else error} {bench.get('value', '')}")
    print(f"secrets found in stored results: {len(leaks)}")
    return 0 if len(records) == len(uploaded) and not leaks else 1


if __name__ == "__main__":
    raise SystemExit(main())
