"""Grading workers on a cluster scheduler: SLURM jobs matched to the queue (slurm.py) and
Kubernetes manifests rendered with the course's settings (kubernetes.py); `grader fleet`
(cli.py). docs/deployment.md, "More than one host"."""
