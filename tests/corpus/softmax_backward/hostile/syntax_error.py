"""A submission that does not parse (a missing colon after the def).

Expected: verdict error, error.kind syntax (found without running anything).
"""
import torch


def softmax_backward(y, g)
    return y * (g - (y * g).sum(-1, keepdim=True))
