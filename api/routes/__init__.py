"""One router module per resource; all are mounted in api/main.py."""
