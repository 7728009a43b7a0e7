"""Assignment registry: one module per assignment, each exposing the same names.

A module registered here provides ``FUNCTION_NAME``, ``MODULE_FILE``, ``CHECK_NAMES``,
``TOLERANCES``, ``BENCHMARK_SHAPES``, ``BENCHMARK_DTYPES``, ``vjp_fp64`` (its fp64 oracle) and
``build_plan(seed=, device=)``. Adding an assignment is one new module and one line below.
"""

from __future__ import annotations

import importlib
from types import ModuleType

ASSIGNMENTS: dict[str, str] = {
    "softmax_backward": "grader.assignments.softmax_backward",
}


class UnknownAssignment(KeyError):
    """No assignment of that name is registered."""


def get_assignment(name: str) -> ModuleType:
    """The spec module of assignment ``name``.

    Raises:
        UnknownAssignment: ``name`` is not in ASSIGNMENTS.
    """
    try:
        return importlib.import_module(ASSIGNMENTS[name])
    except KeyError:
        raise UnknownAssignment(f"unknown assignment {name!r}; known: {', '.join(sorted(ASSIGNMENTS))}") from None
