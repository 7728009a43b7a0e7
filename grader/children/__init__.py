"""The processes of one grading, as the parent starts, watches and ends them: the main check
child (started ahead of its job or for it), the isolated child, and the trusted replay process."""
