"""``python -m grader`` is the ``grader`` console script.

``python -m grader check`` (how a worker runs the grader) leaves with ``os._exit`` once its
output is flushed: the grading has cleaned up after itself by then (its folders removed, its
children and the replay process ended), and the interpreter's own teardown (torch, threads,
the CUDA driver) took 1.5 s or more per grading, on the path from upload to verdict, for
nothing the worker reads (issue 11, point 6).
"""

import os
import sys

from grader.cli import main

code = main()
if sys.argv[1:2] == ["check"]:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
sys.exit(code)
