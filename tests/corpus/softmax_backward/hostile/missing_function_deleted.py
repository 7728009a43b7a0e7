"""Defines softmax_backward at the top level, then deletes it: the static check sees a def,
the module has no such attribute after import.

Expected: verdict error, error.kind missing_function (found by the child's lookup).
"""
import torch


def softmax_backward(y, g):
    return y * (g - (y * g).sum(-1, keepdim=True))


del softmax_backward
