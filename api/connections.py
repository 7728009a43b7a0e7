"""A deadline for a request's headers, in uvicorn's HTTP/1.1 connection (h11).

uvicorn closes a keep-alive connection that stays silent for ``timeout_keep_alive`` after an
answer, but a new connection, or one whose client has sent part of a request's headers, has
no deadline at all: it is held for as long as the client likes. `header_deadline_protocol`
gives uvicorn a protocol (its own `H11Protocol`, which `grader serve` uses in any case)
that closes a connection whose next request's headers are not complete within
``GRADER_API_HEADER_TIMEOUT_S`` of the connection opening or of the previous answer
ending: with a 408 when part of them came (a client that is sending may read it), silently
when nothing did. Header size is bounded by h11 (``h11_max_incomplete_event_size``, 16 KiB:
400 beyond). The body's deadline is api/guard.py's. The same protocol aborts a connection
whose client reads nothing of its answer for ``GRADER_API_BODY_TIMEOUT_S`` once the socket's
buffers are full, so that a client that stops reading cannot hold a request place either.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from submissions.errors import RequestTimeout

logger = logging.getLogger("api.connections")

#: Seconds a connection is kept open, reading and dropping, after its 408 (see `_headers_late`).
LINGER_S = 1.0


def _timeout_answer(timeout_s: float) -> bytes:
    body = json.dumps({"error": {
        "code": RequestTimeout.code, "timeout_s": timeout_s,
        "message": f"the request headers did not arrive within {timeout_s:g} s"}}).encode()
    return (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n"
            + body)


def header_deadline_protocol(header_timeout_s: float,
                             write_timeout_s: float | None = None) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a deadline of `header_timeout_s` seconds for every
    request's headers (pass it as ``uvicorn.Config(http=...)``) and, with `write_timeout_s`,
    one for a client that reads nothing of its answer: when the answer's bytes have filled the
    socket's buffers and none drains for `write_timeout_s` seconds, the connection is
    aborted. uvicorn then treats the client as gone, so the route's pending ``send`` returns
    and its request place is freed (a client that stops reading cannot hold one)."""

    class HeaderDeadlineH11Protocol(H11Protocol):
        _header_deadline: Any = None
        _write_deadline: Any = None
        _bytes_since_answer = 0
        _timed_out = False

        def pause_writing(self) -> None:
            super().pause_writing()
            if write_timeout_s is not None and self._write_deadline is None:
                self._write_deadline = self.loop.call_later(write_timeout_s, self._reader_stalled)

        def resume_writing(self) -> None:
            if self._write_deadline is not None:
                self._write_deadline.cancel()
                self._write_deadline = None
            super().resume_writing()

        def _reader_stalled(self) -> None:
            self._write_deadline = None
            if not self.transport.is_closing():
                logger.info("closed a connection whose client read nothing of its answer "
                            "for %g s", write_timeout_s)
                self.transport.abort()

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm_header_deadline()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_header_deadline()
            if self._write_deadline is not None:
                self._write_deadline.cancel()
                self._write_deadline = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self._timed_out:
                return  # answered 408: what else arrives is read and dropped until the close
            self._bytes_since_answer += len(data)
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # the request's headers are complete
                self._disarm_header_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._bytes_since_answer = 0  # the next request may already be buffered
                self._arm_header_deadline()

        def _arm_header_deadline(self) -> None:
            self._disarm_header_deadline()
            self._header_deadline = self.loop.call_later(header_timeout_s, self._headers_late)

        def _disarm_header_deadline(self) -> None:
            if self._header_deadline is not None:
                self._header_deadline.cancel()
                self._header_deadline = None

        def _headers_late(self) -> None:
            self._header_deadline = None
            if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
                return
            if not self._bytes_since_answer:
                self.transport.close()
                return
            # A lingering close: the answer, then end of stream, then the connection is closed
            # a second later. Closing at once with the client's bytes unread would reset the
            # connection, and a reset can destroy the 408 before the client reads it.
            self._timed_out = True
            self.transport.write(_timeout_answer(header_timeout_s))
            if self.transport.can_write_eof():
                self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)

    return HeaderDeadlineH11Protocol
