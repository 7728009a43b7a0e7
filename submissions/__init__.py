"""Submission lifecycle: models, the database-backed job queue, the worker loop, service CLI.

This package never imports torch or triton: grading happens in a `grader check` subprocess.
"""
