"""Replaces done.json by a symbolic link to /dev/zero and leaves during its import. A parent
that reads done.json following links reads zeros without end, until the OOM killer ends it.

Expected: verdict error, error.kind tampered, the same message as for a link to /dev/ptmx or
to a folder (what the link points at, or whether it exists on the host, does not show), and
the grader's memory stays bounded.
"""
import os

os.symlink("/dev/zero", "done.json")
os._exit(0)


def softmax_backward(y, g):
    return y
