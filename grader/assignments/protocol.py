"""What the runner, the harnesses and the benchmark need of an assignment (a typed protocol).

Each folder ``grader/assignments/<name>/`` has the same files and exposes one object,
``ASSIGNMENT``, that satisfies ``Assignment``:

    spec.py       tolerances, check names, hints, benchmark rows (the public contract's numbers)
    oracle.py     the fp64 oracles
    inputs.py     seeded input generators of the checks
    checks.py     the named checks (inputs, oracles, evaluation) and ``build_plan``
    bench.py      torch-only: benchmark inputs and peers, bound into the timing children
    reference.py  the course reference solution (never visible to a submission)
    template.py   the starter file students get

Generic code (grader/*.py, grader/harness, grader/benchmark) reaches an assignment only
through this protocol and the manifest (grader/manifest.py), never by name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch

from grader.checks import Tolerance
from grader.manifest import AssignmentManifest
from grader.plan import Plan


@dataclass(frozen=True)
class BenchmarkSpec:
    """How an assignment is timed on a GPU.

    Attributes:
        shapes: the input shapes of the benchmark rows (each timed in every dtype).
        dtypes: dtype names (``float32``, ``float16``, ``bfloat16``).
        baseline: the peer the headline ratio is taken against (a key of ``scopes``).
        peers: every peer timed beside the student, in table order (names in bench.py's PEERS,
            its COMPILED_PEER, and ``reference`` for the course reference kernel).
        scopes: what each timed name includes (shown under every figure), ``student`` too.
        floor_bytes: ``floor_bytes(shape, dtype) -> {"min": bytes, "two_pass": bytes}``: bytes a
            kernel must move through device memory at least (one pass) and when it reads its
            inputs twice (rows too long to keep on chip); floor = bytes / copy bandwidth.
        oracle_rows: ``oracle_rows(inputs, rows) -> (expected, scale)``: the fp64 oracle and error
            scale of the output rows ``rows`` (None: all) for the inputs bench.py made.
        bench_file: the assignment's bench.py (bound into the timing children).
        oracle_file: the assignment's oracle.py (torch-only; bound into the replay timer, which
            calls its ``benchmark_oracle(inputs, rows)`` to verify every timed output).
    """

    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    baseline: str
    peers: tuple[str, ...]
    scopes: dict[str, str]
    floor_bytes: Callable[[tuple[int, ...], str], dict[str, int]]
    oracle_rows: Callable[[tuple, tuple[int, ...] | None], tuple[torch.Tensor, torch.Tensor]]
    bench_file: Path
    oracle_file: Path


class Assignment(Protocol):
    """One assignment, as the grader sees it.

    Attributes:
        manifest: the torch-free registry entry (name, function, arguments, file name).
        check_names: the checks in the order they run and are shown.
        benchmark: how it is timed (BenchmarkSpec).
        reference_file: the course reference solution (a peer in the benchmark).
        template_file: the starter file.
        crash_hint: a sentence added to the error of a call that crashed the process.
    """

    manifest: AssignmentManifest
    check_names: tuple[str, ...]
    benchmark: BenchmarkSpec
    reference_file: Path
    template_file: Path
    crash_hint: str

    def build_plan(self, *, seed: int, device: str) -> Plan:
        """Every check's inputs and oracles for one run (``seed`` seeds all inputs; ``device``
        ``cpu`` or ``cuda``)."""
        ...

    def tolerance(self, dtype: torch.dtype) -> Tolerance:
        """The tolerance of outputs of ``dtype`` (used to re-verify timed outputs)."""
        ...
