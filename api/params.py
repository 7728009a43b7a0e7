"""Bounded integer parameters shared by the routes.

Every id the database stores is a 32-bit ``INTEGER`` on PostgreSQL (and SQLite binds at
most 64 bits), so an unbounded ``int`` parameter turned ``GET /api/v1/submissions/2147483648``
or ``?offset=2**63`` into a database error and a 500 (issue 10). Ids are 1 .. 2**31 - 1 and
offsets 0 .. 2**31 - 1; anything outside is a 422 ``validation_error`` (documented in the
OpenAPI schema as ``minimum``/``maximum``).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query

from api.schemas import MAX_DB_INT, StoredText
from grader.manifest import MANIFESTS

__all__ = ["MAX_DB_INT", "AssignmentName", "AssignmentQuery", "Offset", "RegradeId", "StaffId",
           "StudentId", "SubmissionId"]

#: The registered assignments (grader/manifest.py), listed in the OpenAPI document. Any other
#: name is still accepted by validation and answered 422 ``unknown_assignment`` with the
#: known names, as before.
_ASSIGNMENT_NAMES = {"enum": sorted(MANIFESTS)}
AssignmentName = Annotated[StoredText, Path(max_length=100, json_schema_extra=_ASSIGNMENT_NAMES,
                                     description="an assignment's name")]
AssignmentQuery = Annotated[StoredText, Query(max_length=100, json_schema_extra=_ASSIGNMENT_NAMES,
                                       description="an assignment's name")]

SubmissionId = Annotated[int, Path(ge=1, le=MAX_DB_INT, description="a submission's id")]
StudentId = Annotated[int, Path(ge=1, le=MAX_DB_INT, description="a student's id")]
StaffId = Annotated[int, Path(ge=1, le=MAX_DB_INT, description="a staff member's id")]
RegradeId = Annotated[int, Path(ge=1, le=MAX_DB_INT, description="a regrade batch's id")]
Offset = Annotated[int, Query(ge=0, le=MAX_DB_INT, description="rows to skip")]
