"""Writes a call line with Rich markup on the progress pipe (its descriptor is the harness's
last argument), then spins: the timeout's message names the call it was "in", and a grader that
printed that with markup on raised MarkupError, an infrastructure failure retried three times
(one such upload held a worker 1,415 s with the defaults).

Expected: verdict error, error.kind timeout, exit 2 (charged), within the child's limit plus a
few seconds; the message holds the text as data.
"""
import os
import sys

os.write(int(sys.argv[-1]), b"call [/] [bold]x[/bold]\ncompiling 1 {\"kernel\": \"[/]\"}\n")
while True:
    pass


def softmax_backward(y, g):
    return y
