"""Reading an uploaded file from a multipart/form-data request with a hard size cap.

The body is parsed as it streams in; the request is rejected (413) as soon as the ``file``
part exceeds ``max_upload_bytes`` or the whole body exceeds it plus a small allowance for
the multipart framing. Memory use is bounded by the cap, never by what the client sends:
only the ``file`` part and the known small fields (``assignment``) are kept; the data of
any other part is counted toward the body cap and dropped, and only its name is remembered
(so that a body without ``file`` is reported as such, naming what was sent instead).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, MultipartState, parse_options_header

from api.deps import SettingsDep
from grader.manifest import DEFAULT_ASSIGNMENT
from submissions.errors import (
    UploadMalformed,
    UploadMissingFile,
    UploadTooLarge,
    UploadTruncated,
    describe_size,
)

#: Allowance for multipart boundaries, part headers and the small form fields.
FRAMING_ALLOWANCE_BYTES = 16 * 1024
#: Longest accepted value of a known non-file form field (e.g. ``assignment``).
MAX_FIELD_BYTES = 200
#: The form fields kept besides ``file``; other parts are skipped. ``csrf_token``: the web
#: upload form's (api/pages/security.py checks it; the API ignores it).
KNOWN_FIELDS = frozenset({"assignment", "csrf_token"})
#: How many names of skipped parts are remembered (for the error message), and their length.
MAX_REMEMBERED_PARTS, MAX_PART_NAME_CHARS = 10, 50

#: OpenAPI description of the request body (the handler reads the stream itself).
UPLOAD_OPENAPI = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {"type": "string", "format": "binary",
                                 "description": "the Python source file (UTF-8)"},
                        "assignment": {"type": "string", "default": DEFAULT_ASSIGNMENT},
                    },
                }
            }
        },
    }
}


@dataclass(frozen=True)
class UploadedFile:
    """The ``file`` part (bytes and client file name), the chosen assignment, and the web
    form's CSRF token (None from API clients)."""

    content: bytes
    client_filename: str | None
    assignment: str
    csrf_token: str | None = None


class _FormCollector:
    """python-multipart callbacks that keep the ``file`` part (capped) and the known small
    fields (capped); the data of other parts is dropped. Part names are remembered."""

    def __init__(self, max_file_bytes: int) -> None:
        self.max_file_bytes = max_file_bytes
        self.file_content: bytearray | None = None
        self.client_filename: str | None = None
        self.fields: dict[str, bytearray] = {}
        self.other_parts: list[str] = []  # names of the parts other than `file`
        self._header_name = bytearray()
        self._header_value = bytearray()
        self._headers: dict[bytes, bytes] = {}
        self._target: bytearray | None = None
        self._target_limit = 0
        self._target_is_file = False
        self._target_name = ""

    def callbacks(self) -> dict[str, object]:
        return {
            "on_part_begin": self._on_part_begin,
            "on_header_field": lambda data, start, end: self._header_name.extend(data[start:end]),
            "on_header_value": lambda data, start, end: self._header_value.extend(data[start:end]),
            "on_header_end": self._on_header_end,
            "on_headers_finished": self._on_headers_finished,
            "on_part_data": self._on_part_data,
        }

    def _on_part_begin(self) -> None:
        self._headers = {}
        self._target = None

    def _on_header_end(self) -> None:
        self._headers[bytes(self._header_name).lower()] = bytes(self._header_value)
        self._header_name.clear()
        self._header_value.clear()

    def _on_headers_finished(self) -> None:
        disposition, options = parse_options_header(self._headers.get(b"content-disposition"))
        if disposition != b"form-data" or b"name" not in options:
            raise UploadMalformed("a multipart part lacks Content-Disposition: form-data; name=...")
        name = options[b"name"].decode("utf-8", "replace")
        if name == "file":
            if self.file_content is not None:
                raise UploadMalformed("more than one `file` part")
            self.file_content = bytearray()
            raw_filename = options.get(b"filename")
            self.client_filename = raw_filename.decode("utf-8", "replace") if raw_filename else None
            self._target, self._target_limit, self._target_is_file = (
                self.file_content, self.max_file_bytes, True
            )
            return
        if len(self.other_parts) < MAX_REMEMBERED_PARTS:
            self.other_parts.append(name[:MAX_PART_NAME_CHARS])
        if name in KNOWN_FIELDS:
            self._target = self.fields.setdefault(name, bytearray())
            self._target_limit, self._target_is_file = MAX_FIELD_BYTES, False
            self._target_name = name

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._target is None:
            return
        self._target.extend(data[start:end])
        if len(self._target) > self._target_limit:
            if self._target_is_file:
                raise UploadTooLarge(
                    f"the file is larger than the upload limit of "
                    f"{describe_size(self.max_file_bytes)}",
                    max_bytes=self.max_file_bytes,
                )
            raise UploadMalformed(
                f"the form field `{self._target_name}` is longer than {MAX_FIELD_BYTES} bytes"
            )


async def read_uploaded_file(request: Request, settings: SettingsDep) -> UploadedFile:
    """Stream-parse the multipart body and return the ``file`` part.

    Only awaits network reads (no blocking work), so it is an ``async`` dependency; the
    handler that uses it is a plain ``def`` run in the thread pool.

    Raises:
        UploadTooLarge: the file exceeds ``max_upload_bytes`` (checked while reading).
        UploadMalformed: not multipart/form-data, or a malformed body.
        UploadTruncated: the body ends before its closing boundary (400).
        UploadMissingFile: a well-formed multipart body without a ``file`` part.
    """
    max_file_bytes = settings.max_upload_bytes
    max_body_bytes = max_file_bytes + FRAMING_ALLOWANCE_BYTES
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_body_bytes:
        raise UploadTooLarge(
            f"the file is larger than the upload limit of {describe_size(max_file_bytes)}",
            max_bytes=max_file_bytes,
        )
    content_type, options = parse_options_header(request.headers.get("content-type"))
    boundary = options.get(b"boundary")
    if content_type != b"multipart/form-data" or not boundary:
        raise UploadMalformed("send the file as multipart/form-data in a field named `file`")

    collector = _FormCollector(max_file_bytes)
    try:
        parser = MultipartParser(boundary, collector.callbacks(), max_size=max_body_bytes)
        received = 0
        async for chunk in request.stream():
            received += len(chunk)
            if received > max_body_bytes:
                raise UploadTooLarge(
                    f"the file is larger than the upload limit of "
                    f"{describe_size(max_file_bytes)}",
                    max_bytes=max_file_bytes,
                )
            parser.write(chunk)
        parser.finalize()
    except FormParserError as exc:
        raise UploadMalformed(f"malformed multipart body: {exc}") from None
    if parser.state != MultipartState.END:
        # python-multipart's finalize() accepts a body cut off anywhere: a client (or a
        # proxy) that dropped the end of the upload must not get a truncated file graded.
        raise UploadTruncated("the multipart body ends before its closing boundary "
                              f"(--{boundary.decode('latin-1')}--): send the whole file again")

    if collector.file_content is None:
        sent = ", ".join(f"`{name}`" for name in collector.other_parts) or "none"
        raise UploadMissingFile(
            f"the multipart field `file` is missing (fields sent: {sent}); "
            "send the source as e.g. `curl -F file=@<your file>.py ...`",
            fields=collector.other_parts,
        )
    assignment = collector.fields.get("assignment")
    csrf_token = collector.fields.get("csrf_token")
    return UploadedFile(
        content=bytes(collector.file_content),
        client_filename=collector.client_filename,
        assignment=assignment.decode("utf-8", "replace").strip() if assignment else DEFAULT_ASSIGNMENT,
        csrf_token=csrf_token.decode("utf-8", "replace") if csrf_token else None,
    )


UploadDep = Annotated[UploadedFile, Depends(read_uploaded_file)]
