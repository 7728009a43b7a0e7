"""Spins forever inside the first call.

Expected (with a short child timeout): verdict error, error.kind timeout, naming the call.
"""
import torch


def softmax_backward(y, g):
    n = 0
    while True:
        n += 1
