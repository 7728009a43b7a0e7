"""Imports the course's reference solution from the grader package and hands it in.

Expected: verdict error, error.kind import (the project packages are not visible to the child).
"""
from grader.assignments.softmax_backward.reference import softmax_backward  # noqa: F401
