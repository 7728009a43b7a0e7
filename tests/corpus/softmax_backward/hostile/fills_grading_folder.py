"""Writes its work folder full during its import, 16 MiB a file, until a write fails (at most
8 GiB: never all of a host's disk when the grading folder has no cap of its own), then leaves.
The work folder and the Triton cache used to be folders of the host's disk, so nothing but the
disk's end stopped it, and a grader killed meanwhile left it all there.

Expected (graded with a 256 MiB grading folder): verdict error, error.kind resource_limit
("filled the grading folder ... to its cap"), and nothing of it left on the host afterwards.
"""
import os

_chunk = b"\xa5" * (16 << 20)
_written = 0
try:
    while _written < 8 << 30:
        with open(f"fill_{_written >> 24}.bin", "wb") as handle:
            handle.write(_chunk)
        _written += len(_chunk)
except OSError as exc:
    print(f"FILL_STOPPED after {_written} bytes: {exc.strerror}")
os._exit(0)


def softmax_backward(y, g):
    return y
