"""Replaces done.json by a FIFO (named pipe) and leaves during its import. A parent that opens
it for reading blocks until someone writes to it: nobody ever does.

Expected: verdict error, error.kind tampered ("it is a FIFO (named pipe)"), within the child's
limit plus a few seconds.
"""
import os

os.mkfifo("done.json")
os._exit(0)


def softmax_backward(y, g):
    return y
