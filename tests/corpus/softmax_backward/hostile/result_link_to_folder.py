"""Replaces done.json by a symbolic link to a host folder (/root) and leaves during its import.
Through the link, the parent would answer whether /root exists on the host, and reading it
fails in a way that depends on the host.

Expected: verdict error, error.kind tampered, the same message as for a link to a device.
"""
import os

os.symlink("/root", "done.json")
os._exit(0)


def softmax_backward(y, g):
    return y
