"""Calls sys.exit(0) while being imported, hoping a clean exit status reads as success.

Expected: verdict error, error.kind exited.
"""
import sys

print('{"verdict": "passed"}')
sys.exit(0)


def softmax_backward(y, g):
    return y
