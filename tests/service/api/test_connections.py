"""api/connections.py: uvicorn's h11 protocol with deadlines, on a real socket. (The header
deadline against a real `grader serve`: tests/service/api/test_edge.py.)"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time

from uvicorn.config import Config
from uvicorn.server import ServerState

from api.connections import header_deadline_protocol

MB = 1024 * 1024


def test_a_client_that_reads_nothing_of_its_answer_is_cut_off_and_frees_the_route() -> None:
    """64 MiB to a client that reads nothing (a 4 KiB receive buffer): the route's `send`
    blocks once the buffers are full; 1 s later the connection is aborted, the pending `send`
    returns and the route finishes (as its request place is then freed)."""
    finished: dict[str, float] = {}

    async def app(scope, receive, send) -> None:  # noqa: ANN001
        await receive()
        started = time.monotonic()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(64 * MB).encode())]})
        for _ in range(64):
            await send({"type": "http.response.body", "body": b"x" * MB, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        finished["after_s"] = time.monotonic() - started

    async def scenario() -> float | None:
        config = Config(app, lifespan="off", log_level="warning",
                        http=header_deadline_protocol(5.0, write_timeout_s=1.0))
        config.load()
        state = ServerState()
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: config.http_protocol_class(config=config, server_state=state,
                                               app_state={}, _loop=loop),
            "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        client.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            client.connect(("127.0.0.1", port))
        await asyncio.sleep(0.1)
        client.send(b"GET / HTTP/1.1\r\nHost: grader.test\r\n\r\n")
        deadline = time.monotonic() + 15
        while "after_s" not in finished and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        client.close()
        server.close()
        return finished.get("after_s")

    after_s = asyncio.run(scenario())
    assert after_s is not None, "the route's send never returned: the stalled reader held it"
    assert 1.0 <= after_s < 5.0, after_s
