"""The service's view of the assignment registry.

The service must not import `grader` (which imports torch), so it keeps the small part of
each assignment it needs to validate an upload: the name of the top-level function the
student file must define. Keep it in step with grader/assignments.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_ASSIGNMENT = "softmax_backward"


@dataclass(frozen=True)
class AssignmentEntry:
    """What the upload validator needs to know about one assignment."""

    name: str
    function: str


ASSIGNMENTS: dict[str, AssignmentEntry] = {
    "softmax_backward": AssignmentEntry(name="softmax_backward", function="softmax_backward"),
}
