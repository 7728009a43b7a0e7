"""Grading layer: assignment registry, checks, fp64 oracles, sandboxed runner, benchmark, CLI.

Knows nothing of HTTP or databases: it takes a submission's source text and returns a result
document (docs/architecture.md). Usable alone: ``grader check FILE --assignment NAME``.
"""
