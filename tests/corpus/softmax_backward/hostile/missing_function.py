"""A submission whose function has the wrong name (softmax_backwards, with an s).

Expected: verdict error, error.kind missing_function (found without running anything).
"""
import torch


def softmax_backwards(y, g):
    return y * (g - (y * g).sum(-1, keepdim=True))
