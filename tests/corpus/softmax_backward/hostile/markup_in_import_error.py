"""Raises at import with Rich markup in its message. A grader that prints the message with
markup on raised MarkupError after writing its JSON: exit 1 beside an ``error`` document, an
infrastructure failure the worker retried three times, uncharged.

Expected: verdict error, error.kind import, the message shown as written, exit 2 (charged).
"""
raise ValueError("[/] [bold red]x[/bold red] [link=https://evil.example]y[/link]")


def softmax_backward(y, g):
    return y
