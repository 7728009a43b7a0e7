"""The checks and their verdicts: the plan of calls and inputs, the tolerances, the generic
check kinds an assignment declares, their evaluation against the fp64 oracles, the verdict."""
