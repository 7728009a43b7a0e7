"""Assignment registry: ``get_assignment(name)`` loads ``grader/assignments/<name>/``.

Which assignments exist is decided by the torch-free manifest (grader/manifest.py); each
entry's ``package`` is a folder here whose ``ASSIGNMENT`` satisfies
``grader.assignments.protocol.Assignment``.
"""

from __future__ import annotations

import importlib

from grader.assignments.protocol import Assignment
from grader.manifest import UnknownAssignment, get_manifest

__all__ = ["Assignment", "UnknownAssignment", "get_assignment"]


def get_assignment(name: str) -> Assignment:
    """The grading side of assignment ``name``.

    Raises:
        UnknownAssignment: ``name`` is not in the manifest.
    """
    manifest = get_manifest(name)
    return importlib.import_module(manifest.package).ASSIGNMENT
