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

#: Seconds a connection is kept open, reading and dropping, after an answer that closes it
#: while its client may still be sending (`_LingeringTransport`), and the most it drops then.
LINGER_S, LINGER_MAX_BYTES = 1.0, 1024 * 1024


def _timeout_answer(timeout_s: float) -> bytes:
    body = json.dumps({"error": {
        "code": RequestTimeout.code, "timeout_s": timeout_s,
        "message": f"the request headers did not arrive within {timeout_s:g} s"}}).encode()
    return (b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n"
            + body)


class _LingeringTransport:
    """A connection's transport whose ``close`` lingers while the client may still be
    sending (``should_linger()``): the answer already written, then end of stream, and the
    socket closed `LINGER_S` later, what arrives meanwhile dropped (at most
    `LINGER_MAX_BYTES`). Closing at once with the
    client's bytes unread, or with more on the way, makes the kernel reset the connection,
    and a reset can destroy the 408 or 413 before the client reads it (nginx's
    ``lingering_close`` does the same). Everything else is the wrapped transport's."""

    def __init__(self, transport: Any, loop: Any, should_linger: Any) -> None:
        self._transport, self._loop, self._should_linger = transport, loop, should_linger
        self.lingering = False
        self._dropped = 0

    def drop(self, data: bytes) -> None:
        """Drop what arrives while lingering; past LINGER_MAX_BYTES, close at once (a client
        that keeps sending gets its reset: it had its answer's chance)."""
        self._dropped += len(data)
        if self._dropped > LINGER_MAX_BYTES:
            self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def close(self) -> None:
        if self.lingering or self._transport.is_closing():
            return
        if not (self._should_linger() and self._transport.can_write_eof()):
            self._transport.close()
            return
        try:
            self._transport.write_eof()
        except OSError:  # the client has gone already
            self._transport.close()
            return
        self.lingering = True
        self._loop.call_later(LINGER_S, self._transport.close)


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
            super().connection_made(_LingeringTransport(transport, self.loop,
                                                        self._client_may_be_sending))
            self._arm_header_deadline()

        def _client_may_be_sending(self) -> bool:
            """A request body not read to its end, or part of the next request's headers."""
            state = self.conn.their_state
            return state is h11.SEND_BODY or (state is h11.IDLE and self._bytes_since_answer > 0)

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm_header_deadline()
            if self._write_deadline is not None:
                self._write_deadline.cancel()
                self._write_deadline = None
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            if self.transport.lingering:
                self.transport.drop(data)  # answered and closing: dropped
                return
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
            if self._bytes_since_answer:  # a client that is sending may read why
                self.transport.write(_timeout_answer(header_timeout_s))
            self.transport.close()  # lingers while the client may be sending

    return HeaderDeadlineH11Protocol
