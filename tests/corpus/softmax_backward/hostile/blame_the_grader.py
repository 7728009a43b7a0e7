"""Deletes the harness's progress.log (in its writable working folder) while being imported,
then exits with status 1: the grader then reads the run as "the child failed before importing
the submission", i.e. as its own fault, which the worker retries and does not charge to the
student.

Expected: verdict error, error.kind exited (the submission's own code ran and exited).
"""
import os

try:
    os.remove("progress.log")
except OSError:
    pass
os._exit(1)


def softmax_backward(y, g):
    return y
