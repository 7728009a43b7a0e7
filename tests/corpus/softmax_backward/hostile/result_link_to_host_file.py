"""Replaces step_0.json, the first step's report, by a symbolic link to a host file
(/etc/passwd) and leaves during its import. A parent that follows the link parses the host's
file as the child's report, and an error message quoting what did not validate would show its
bytes in the student's result.

Expected: verdict error, error.kind tampered, and no byte of /etc/passwd in the result.
"""
import os

os.symlink("/etc/passwd", "step_0.json")
os._exit(0)


def softmax_backward(y, g):
    return y
