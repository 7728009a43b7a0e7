"""Replaces done.json, the harness's last word on how the run ended, by a symbolic link to
/dev/ptmx (the host's pseudo-terminal multiplexer) and leaves during its import. A parent that
opens done.json following links opens the host's terminal device and blocks on it forever,
past every limit of the child (issue 29: one upload held a worker for 90 minutes).

Expected: verdict error, error.kind tampered ("the submission replaced the grader's result
file done.json: it is a symbolic link"), within the child's limit plus a few seconds.
"""
import os

os.symlink("/dev/ptmx", "done.json")
os._exit(0)


def softmax_backward(y, g):
    return y
