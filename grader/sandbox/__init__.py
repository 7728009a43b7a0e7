"""The sandbox and its limits: how a grading's children run (bubblewrap, the work folder,
threads, memory and time for the children and the parent) and where (host cores, GPU)."""
