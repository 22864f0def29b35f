# torch.compile in practice: every entry point of the course kit.
# `make setup` then `make test` is all a fresh machine needs.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SUBMISSION ?= exercises
REPORT ?= reports/$(notdir $(basename $(SUBMISSION))).json
# nbgrader and jupyter call helper commands (alembic, jupyter-*) that live in the venv
export PATH := $(abspath $(BIN)):$(PATH)
export TORCHINDUCTOR_CACHE_DIR ?= $(abspath .cache/inductor)

.PHONY: help setup test test-fast lab grade exercises check-exercises bench clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 18

setup:  ## create .venv with the pinned dependencies and this kit (editable)
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt -e .
	$(BIN)/python -c "import torch, torchvision, timm; print('torch', torch.__version__, '| torchvision', torchvision.__version__, '| timm', timm.__version__, '| cuda', torch.cuda.is_available())"

test:  ## the whole suite (CPU smoke profile): grader, notebooks, timing
	$(BIN)/python -m pytest

test-fast:  ## skip the slow tests (notebook execution, whole-submission grading)
	$(BIN)/python -m pytest -m "not slow"

lab:  ## open the course in JupyterLab
	$(BIN)/jupyter lab --notebook-dir=.

grade:  ## grade exercises/ (or SUBMISSION=path) and print the score table
	$(BIN)/python -m grader $(SUBMISSION) --report $(REPORT)

exercises:  ## regenerate exercises/ from solutions/ with nbgrader
	$(BIN)/python tools/make_exercises.py

check-exercises:  ## fail if exercises/ drifted from solutions/
	$(BIN)/python tools/make_exercises.py --check

bench:  ## measure every lesson's figures; results in bench/results/ (device + torch in the name)
	$(BIN)/python -m coursekit.bench --out bench/results

clean:  ## remove caches, traces and reports (keeps .venv)
	rm -rf .cache runs reports .pytest_cache
