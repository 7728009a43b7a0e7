"""Replaces done.json by a 3 GiB file (sparse: it costs no space) and leaves during its import.
A parent that reads done.json whole holds 3 GiB of zeros in memory to find it is no report.

Expected: verdict error, error.kind tampered ("it holds 3221225472 bytes, over the ... bytes a
report may have"), and the grader's memory stays bounded.
"""
import os

with open("done.json", "wb") as handle:
    handle.truncate(3 << 30)
os._exit(0)


def softmax_backward(y, g):
    return y
