"""The command-line client of the grading service (``grader submit``, ``status``,
``history`` for students; ``grader course ...`` for staff).

It talks HTTP only and imports nothing but httpx, rich, pydantic and the torch-free parts
of this project (api/schemas.py, the wire contract; grader/report/render.py, the renderer that
``grader check`` uses too; grader/manifest.py), so ``pip install kernel-grader`` without
extras is enough to run it.
"""
