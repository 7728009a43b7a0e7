"""Versions recorded with every result: the grader's own, and installed packages'.

The grader version names the checker that produced a verdict (regrades compare it): the
package version plus a digest of the grading code itself (every ``*.py`` under grader/, the
reference solutions included since they are peers of the benchmark), so two checkouts with
different checks never report the same version, whether installed or run from a source tree.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
from pathlib import Path

_GRADER_ROOT = Path(__file__).resolve().parent


def package_version(package: str) -> str | None:
    """The installed version of ``package``, or None when it is not installed."""
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def grader_version() -> str:
    """``<package version>+g<12 hex digits of the grading code's sha256>``, e.g. ``0.1.0+g3fa2c41d9e0b``."""
    digest = hashlib.sha256()
    for path in sorted(_GRADER_ROOT.rglob("*.py")):
        digest.update(path.relative_to(_GRADER_ROOT).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
    return f"{package_version('kernel-grader') or '0'}+g{digest.hexdigest()[:12]}"
