"""OpenMP's wait policy of the grading processes: no imports, so that ``grader check`` can set
it before anything loads torch (and before a missing extra is reported).

``grader check`` sets it for itself (grader/cli.py) and every sandboxed child gets it
(grader/sandbox/run.py ``build_environment``): idle OpenMP threads sleep instead of spinning. A
grading's processes run beside each other (the parent, the check children, the replay process,
the worker's next grader starting up); with spinning threads, one process's parallel torch ops
wait on a core another process holds. On the 2-core development machine, softmax_backward's
plan building took 0.19-0.26 s alone either way, and beside a process importing torch
0.66-1.08 s with the default policy, 0.22 s with this one (docs/benchmarks.md, "Speed of the
grading path, second pass").
"""

#: The value of ``OMP_WAIT_POLICY`` (read by libgomp when torch loads it).
OMP_WAIT_POLICY = "PASSIVE"
