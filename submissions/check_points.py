"""The default points per correctness check that an assignment declares in its folder
(``grader/assignments/<name>/points.toml``, a ``[checks]`` table of check name -> points),
read as data without importing the assignment's package (which needs torch; api/ and
submissions/ never import it). The file sits beside the starter template, found the same
way (grader/manifest.py ``AssignmentManifest.template_file``).
"""

from __future__ import annotations

import functools
import math
import tomllib

from grader.manifest import AssignmentManifest

FILE_NAME = "points.toml"


class CheckPointsInvalid(ValueError):
    """An assignment's points.toml is not a table of check names to non-negative numbers."""


@functools.cache
def default_check_points(manifest: AssignmentManifest) -> dict[str, float]:
    """The assignment's declared points per check, in the file's order (the checks' order);
    {} when its folder has no points.toml (all-or-nothing correctness).

    Raises:
        CheckPointsInvalid: the file exists but is not a ``[checks]`` table of names to
            finite non-negative numbers.
    """
    path = manifest.template_file.with_name(FILE_NAME)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        table = tomllib.loads(raw.decode("utf-8")).get("checks", {})
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CheckPointsInvalid(f"{path}: {exc}") from None
    points: dict[str, float] = {}
    for name, value in table.items():
        if isinstance(value, bool) or not isinstance(value, int | float) \
                or not math.isfinite(value) or value < 0:
            raise CheckPointsInvalid(f"{path}: {name} = {value!r} is not a non-negative number")
        points[str(name)] = float(value)
    return points
