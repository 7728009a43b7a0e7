"""Time a similarity review of a class of 300 uploads on this machine, through the service's
own path: a migrated database (SQLite in a temporary folder, or GRADER_DATABASE_URL), 300
students each with one plausible submission, a review queued as staff would and run by a
real `Worker` turn (submissions/worker.py -> submissions/similarity.py -> copydetect).
Each upload is queued as the service queues it and stored as graded (passed), so that it is
its student's counted submission, the one a review compares (the gradebook's rule,
submissions/standings.py); with --ungraded nothing is graded and the review compares every
student's latest upload (its fallback while nothing counts).

The class is made from the corpus's correct kernels of one assignment (tests/corpus/<a>/correct
and the reference): each student starts from one of them and is, by a seeded draw, an honest
student (the file edited as students do: their own names, a constant changed, comments and
docstring removed or added), a copier (a disguised copy of another student's file:
scripts/similarity_disguise.py), or a copier of the reference. What the review should find is
known, so the script also reports how many planted copies it flagged.

Usage: .venv/bin/python scripts/similarity_class.py [--students 300] [--assignment A]
       [--ungraded] [--output docs/similarity/FILE.json]
Prints one JSON document (and writes it with --output): date, machine, versions, timings.
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import hashlib
import importlib.util
import json
import os
import platform
import random
import resource
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from grader.manifest import MANIFESTS  # noqa: E402
from submissions import repository, similarity  # noqa: E402
from submissions.audit import cli_actor  # noqa: E402
from submissions.db import create_db_engine, create_session_factory  # noqa: E402
from submissions.grading import GradingOutcome  # noqa: E402
from submissions.migrations import upgrade_to_head  # noqa: E402
from submissions.models import Student, Submission, SubmissionStatus, utc_now  # noqa: E402
from submissions.settings import Settings  # noqa: E402
from submissions.worker import Worker  # noqa: E402

_spec = importlib.util.spec_from_file_location("similarity_disguise",
                                               REPO / "scripts" / "similarity_disguise.py")
assert _spec is not None and _spec.loader is not None
disguise_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(disguise_module)


def honest_edit(text: str, rng: random.Random, function: str) -> str:
    """A student's own version of a corpus kernel: names of their own (not disguised to
    hide anything: the way they write), comments gone, and sometimes a block size changed."""
    edited = disguise_module.disguise(text, keep=[function], seed=rng.randrange(2**31),
                                      reorder=False)
    if rng.random() < 0.5:
        edited = edited.replace("4096", rng.choice(["1024", "2048", "8192"]), 1)
    return f"# {rng.choice(['my kernel', 'hw2', 'softmax vjp', 'final version'])}\n" + edited


def make_class(assignment: str, students: int, seed: int) -> tuple[list[str], dict[int, int | str]]:
    """Texts, one per student, and the planted copies: student index -> the index of the
    student copied, or ``"reference"``."""
    manifest = MANIFESTS[assignment]
    rng = random.Random(seed)
    bases = [p.read_text(encoding="utf-8")
             for p in sorted((REPO / "tests" / "corpus" / assignment / "correct").glob("*.py"))]
    reference = (manifest.template_file.parent / "reference.py").read_text(encoding="utf-8")
    texts: list[str] = []
    copies: dict[int, int | str] = {}
    for i in range(students):
        draw = rng.random()
        if i > 10 and draw < 0.08:  # a copier of a classmate
            source = rng.randrange(i)
            texts.append(disguise_module.disguise(texts[source], keep=[manifest.function],
                                                  seed=rng.randrange(2**31)))
            copies[i] = source
        elif draw < 0.10:  # a copier of the reference
            texts.append(disguise_module.disguise(reference, keep=[manifest.function],
                                                  seed=rng.randrange(2**31)))
            copies[i] = "reference"
        else:
            texts.append(honest_edit(rng.choice(bases), rng, manifest.function))
        ast.parse(texts[-1])
    return texts, copies


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=300)
    parser.add_argument("--assignment", default="softmax_backward", choices=sorted(MANIFESTS))
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--ungraded", action="store_true",
                        help="leave the uploads ungraded (the review then compares the latest uploads)")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()

    texts, copies = make_class(args.assignment, args.students, args.seed)
    with tempfile.TemporaryDirectory() as folder:
        url = os.environ.get("GRADER_DATABASE_URL") or f"sqlite:///{folder}/class.db"
        upgrade_to_head(database_url=url)
        engine = create_db_engine(url)
        factory = create_session_factory(engine)
        now = utc_now()
        with factory.begin() as session:
            ids = []
            for i, text in enumerate(texts):
                student = Student(name=f"student{i:03d}", name_key=f"student{i:03d}",
                                  token_sha256=hashlib.sha256(f"t{i}".encode()).hexdigest(),
                                  created_at=now)
                session.add(student)
                session.flush()
                digest = hashlib.sha256(text.encode()).hexdigest()
                if args.ungraded:  # no grading queued: the worker's turn is the review's
                    submission = Submission(student_id=student.id, assignment=args.assignment, source_text=text,
                                            source_sha256=digest, source_bytes=len(text.encode()), created_at=now,
                                            original_filename="k.py")
                    session.add(submission)
                    session.flush()
                else:
                    submission = repository.insert_submission(
                        session, student_id=student.id, assignment=args.assignment, source_text=text,
                        source_sha256=digest, source_bytes=len(text.encode()), original_filename="k.py", now=now)
                ids.append(submission.id)
        if not args.ungraded:
            with factory.begin() as session:
                while (job := repository.claim_next_submission(session, worker_id="timing", lease_s=60,
                                                               now=now)) is not None:
                    assert repository.record_grading_outcome(
                        session, submission_id=job.submission_id, lease_token=job.lease_token, now=now,
                        outcome=GradingOutcome(
                            status=SubmissionStatus.PASSED, error_kind=None, error_message=None, checks=[],
                            result_document={"verdict": "passed"}, benchmark=None, headline_speedup=None,
                            versions=None, device="cpu (Triton interpreter)", exit_code=0, duration_s=1.0,
                            log_text=None, log_truncated=False, grader_stderr=""))
        with factory.begin() as session:
            similarity.request_run(session, assignment=args.assignment, threshold=None,
                                   actor=cli_actor(), now=now)
        settings = Settings(_env_file=None, database_url=url, environment="development",
                            grader_warm_start=False, worker_spool_dir=f"{folder}/spool")
        def cpu_s_now() -> float:
            # The worker's own CPU time and its finished children's (the review child).
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
            return time.process_time() + children.ru_utime + children.ru_stime

        load_before = os.getloadavg()
        started, cpu_started = time.perf_counter(), cpu_s_now()
        assert Worker(settings, factory, worker_id="timing").process_next_job()
        wall_s, cpu_s = time.perf_counter() - started, cpu_s_now() - cpu_started
        load_after = os.getloadavg()
        with factory() as session:
            run = repository.latest_similarity_run(session, assignment=args.assignment)
            pairs = repository.list_similarity_pairs(session, run_id=run.id)
            found = {(p.left_submission_id, p.right_submission_id or f"source:{p.right_source_id}")
                     for p in pairs}
            sources = {s.id: s.kind for s in repository.list_similarity_sources(
                session, assignment=args.assignment)}
            run_row = {"status": run.status, "tool": run.tool, "parameters": run.parameters,
                       "submissions_compared": run.submissions_compared,
                       "sources_compared": run.sources_compared,
                       "pairs_compared": run.pairs_compared,
                       "engine_duration_s": round(run.duration_s, 3)}
        engine.dispose()
    reference_ids = [sid for sid, kind in sources.items() if kind == "reference"]
    planted_found = 0
    for i, target in copies.items():
        if target == "reference":
            key = (ids[i], f"source:{reference_ids[0]}") if reference_ids else None
        else:
            key = (ids[target], ids[i])
        planted_found += key in found
    flagged_ids = {p[0] for p in found} | {p[1] for p in found if isinstance(p[1], int)}
    planted_ids = {ids[i] for i in copies} | {ids[t] for t in copies.values() if t != "reference"}
    document = {
        "what": "similarity review of a class, one worker turn (claim, read, the review child "
                "compares, store)",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpus": os.cpu_count(), "processor": platform.processor() or platform.machine()},
        "versions": {p: metadata.version(p) for p in ("copydetect", "numpy", "pygments",
                                                      "sqlalchemy")},
        "database": url.split(":")[0] if "GRADER_DATABASE_URL" in os.environ else "sqlite (file)",
        "assignment": args.assignment, "students": args.students, "seed": args.seed,
        "uploads_graded": not args.ungraded,
        "source_bytes_total": sum(len(t.encode()) for t in texts),
        "run": run_row,
        "worker_turn_wall_s": round(wall_s, 3),
        # CPU time of the worker and its review child (less sensitive than the wall clock
        # to the other processes of a shared machine; the load averages say how shared it was).
        "worker_turn_cpu_s": round(cpu_s, 3),
        "load_average_1m_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
        "pairs_stored": len(found),
        "planted_copies": len(copies),
        "planted_copies_flagged": planted_found,
        "students_in_a_flagged_pair_not_planted": len(flagged_ids - planted_ids),
    }
    text = json.dumps(document, indent=2)
    print(text)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
