"""Reading a small text body (a roster CSV) with a hard size cap, as it streams in."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from submissions.errors import RosterInvalid, SourceNotUtf8, UploadMalformed, UploadTooLarge

#: Largest roster accepted, bytes (a class of 10 000 with long names and e-mails fits).
MAX_ROSTER_BYTES = 2 * 1024 * 1024

#: OpenAPI description of a CSV request body (the dependency reads the stream itself).
CSV_OPENAPI = {
    "requestBody": {
        "required": True,
        "content": {
            "text/csv": {
                "schema": {"type": "string"},
                "example": "name,email,id\nAda Lovelace,ada@example.edu,s001\n",
            }
        },
    }
}


async def read_capped(request: Request, *, max_bytes: int, what: str) -> bytes:
    """The request body, at most ``max_bytes``: a larger ``Content-Length`` is refused before
    reading, and a body that grows past the cap while streaming as soon as it does, so no more
    than the cap is ever buffered. ``what`` names the body in the error ("the roster").

    Raises:
        UploadTooLarge: the body is (or declares to be) larger than ``max_bytes``.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise UploadTooLarge(f"{what} is larger than {max_bytes} bytes", max_bytes=max_bytes)
    body = bytearray()
    async for chunk in request.stream():
        body.extend(chunk)
        if len(body) > max_bytes:
            raise UploadTooLarge(f"{what} is larger than {max_bytes} bytes", max_bytes=max_bytes)
    return bytes(body)


async def read_csv_body(request: Request) -> str:
    """The request body as text: ``Content-Type: text/csv`` (UTF-8), at most
    MAX_ROSTER_BYTES. Only awaits network reads, so it is an ``async`` dependency.

    Raises:
        UploadMalformed: another content type.
        UploadTooLarge: a larger body (checked while reading).
        SourceNotUtf8: not UTF-8.
        RosterInvalid: a NUL character (the database cannot store it), with its line.
    """
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type not in {"text/csv", "text/plain"}:
        raise UploadMalformed("send the roster as the request body with "
                              "Content-Type: text/csv (curl --data-binary @roster.csv)")
    body = await read_capped(request, max_bytes=MAX_ROSTER_BYTES, what="the roster")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceNotUtf8(f"the roster is not UTF-8 text: {exc.reason} at byte "
                            f"{exc.start}") from None
    if "\x00" in text:  # UTF-8 has no lone surrogates: NUL is all storable_text_problem finds
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise RosterInvalid("the roster contains a NUL character; nothing was imported",
                            errors=[{"line": line, "message": "a NUL character (U+0000)"}])
    return text


CsvBody = Annotated[str, Depends(read_csv_body)]
