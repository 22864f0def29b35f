# torch.compile in practice: every entry point of the course kit.
# `make setup` then `make test` is all a fresh machine needs.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
SUBMISSION ?= exercises
REPORT ?= reports/$(notdir $(basename $(SUBMISSION))).json
# classroom: the nbgrader course folder, where `make collect` takes submissions from, and grading knobs
COURSE ?= course
SUBMISSIONS ?= submissions
JOBS ?= 1
EX ?= 01
RUNS ?= 3
FRACTION ?= 0.25
BATCH ?= $(COURSE)/submitted
BATCH_OUT ?= $(COURSE)/batch
ENGINE ?= local
TEST_JOBS ?= 2
# xdist hands tests out one at a time, in the order tests/conftest.py sorts them (costliest first); by default it
# sends each process a chunk of consecutive tests up front, which gave one process every reference grading and
# notebook while the other graded wrong submissions before their exercise's compiled kernels were seeded
XDIST_ORDER := --maxschedchunk 1
# each test process of a parallel pass runs single-threaded: TEST_JOBS processes already fill the cores, and a
# second OpenMP thread or Inductor compile process per test only makes them wait for each other (README, "make test").
# No machine lock there either (grader/machine_lock.py): a speed check graded in that pass must fail whatever the
# timing (a wrong result, a naive loss), and the lock only made one process idle while the other finished its check
PARALLEL_ENV := OMP_NUM_THREADS=1 TORCHINDUCTOR_COMPILE_THREADS=1 GRADER_LOCK=off
# the oldest torch the kit supports, for `make test-compat`
COMPAT_VENV ?= .venv-compat
COMPAT_TORCH ?= 2.11.0
COMPAT_TORCHVISION ?= 0.26.0
# what can differ between torch versions: lessons and solutions executed, references graded, the lessons' own tests,
# and what `make test` leaves to this pass (marker compat: the lesson and solution notebooks, the wrong submissions that
# fail only checks an earlier one already fails; -k matches a test's markers too)
COMPAT_TESTS := -k "compat or executes_top_to_bottom or solution_passes_every_correctness or not (test_grader or test_notebooks \
	or test_workflow or test_browser or test_loader or test_sandbox or test_gpu_check or test_integrity or test_quiet)"
# on a GPU machine that has torch but no .venv (see README, "The first run on a GPU"), its own python3
PY := $(if $(wildcard $(BIN)/python),$(BIN)/python,$(PYTHON))
WHEEL_PLATFORMS := $(foreach n,1 2014 _2_5 _2_17 _2_24 _2_26 _2_27 _2_28 _2_31 _2_34 _2_35,--platform manylinux$(n)_x86_64)
# nbgrader and jupyter call helper commands (alembic, jupyter-*) that live in the venv
export PATH := $(abspath $(BIN)):$(PATH)
export TORCHINDUCTOR_CACHE_DIR ?= $(abspath .cache/inductor)

.PHONY: help setup lint format test test-fast test-notebooks lab grade exercises fixtures check-exercises bench clean test-browser \
	release collect autograde feedback export calibrate warm-cache check batch speed-trials gpu-check gpu-wheels test-compat

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 18

# TORCH_INDEX=https://download.pytorch.org/whl/cpu: torch and torchvision from PyTorch's CPU-only index first (no CUDA
# libraries), then the rest; the pins still hold (2.14.1+cpu satisfies torch==2.14.1). Not tried on this project's
# machines, which reach PyPI only.
TORCH_INDEX ?=
TORCH_PINS = $(shell grep -E '^(torch|torchvision)==' requirements.txt)
CPU_HINT = or, without an NVIDIA GPU, a CPU-only torch (no CUDA libraries): make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu

setup:  ## create .venv with the pinned dependencies and this kit (editable; TORCH_INDEX=... for a CPU-only torch)
	@test -x $(BIN)/python || $(if $(TORCH_INDEX),true,$(PYTHON) -m tools.disk_room $(VENV) 7 "make setup" "$(CPU_HINT)")  # 6.4 GiB installed; CPU-only torch: not measured
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "installing torch, torchvision, timm, JupyterLab, nbgrader and the rest of requirements.txt: torch brings its"
	@echo "CUDA libraries (about 6 GB on disk, a few minutes; pip shows each download; they run on a CPU too; for a"
	@echo "CPU-only torch: make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu)"
	$(if $(TORCH_INDEX),$(BIN)/python -m pip install --progress-bar on --index-url $(TORCH_INDEX) $(TORCH_PINS))
	$(BIN)/python -m pip install --progress-bar on -r requirements.txt -e .
	$(BIN)/python -c "import torch, torchvision, timm; print('torch', torch.__version__, '| torchvision', torchvision.__version__, '| timm', timm.__version__, '| cuda', torch.cuda.is_available())"
	$(BIN)/python -m coursekit.toolchain  # torch.compile builds kernels with a C++ compiler (and a C one on CUDA): fails here, with the fix, if there is none

lint:  ## ruff: lint and format check (120 columns; exercises/ are generated and left out)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format:  ## ruff: fix what can be fixed and format in place (then `make exercises` if solutions/ changed)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

test: lint  ## lint, then the suite (CPU smoke profile; notebooks execute in test-compat): most in TEST_JOBS processes, then what times speed, alone
	$(PARALLEL_ENV) $(BIN)/python -m pytest -m "not timing and not browser and not compat" -n $(TEST_JOBS) $(XDIST_ORDER) --junitxml=reports/tests-parallel.xml
	$(BIN)/python -m pytest -m timing --junitxml=reports/tests-timing.xml

test-compat:  ## the same kit on torch $(COMPAT_TORCH) (oldest supported), in $(COMPAT_VENV): what can differ between versions
	@test -x $(COMPAT_VENV)/bin/python || $(PYTHON) -m tools.disk_room $(COMPAT_VENV) 6 "make test-compat"  # 5.1 GiB
	@test -x $(COMPAT_VENV)/bin/python || $(PYTHON) -m venv $(COMPAT_VENV)
	sed -e 's/^torch==.*/torch==$(COMPAT_TORCH)/' -e 's/^torchvision==.*/torchvision==$(COMPAT_TORCHVISION)/' \
		-e '/# instructor/d' requirements.txt > $(COMPAT_VENV)/requirements.txt
	$(COMPAT_VENV)/bin/python -m pip install --quiet -r $(COMPAT_VENV)/requirements.txt
	$(COMPAT_VENV)/bin/python -m pip install --quiet --no-deps -e .
	$(COMPAT_VENV)/bin/python -c "import torch, torchvision, timm; print('compat: torch', torch.__version__, '| torchvision', torchvision.__version__)"
	$(PARALLEL_ENV) $(COMPAT_VENV)/bin/python -m pytest -m "not timing" -n $(TEST_JOBS) $(XDIST_ORDER) $(COMPAT_TESTS) --junitxml=reports/tests-compat.xml

test-notebooks:  ## execute every lesson and solution notebook on the pinned torch (CI executes them in test-compat, on torch 2.11)
	$(PARALLEL_ENV) $(BIN)/python -m pytest tests/test_notebooks.py -k executes_top_to_bottom -n $(TEST_JOBS) $(XDIST_ORDER)

test-browser:  ## JupyterLab in Debian's Chromium (Playwright): a lesson run from the Run menu, an exercise's PASS and FAIL lines, TensorBoard
	$(BIN)/python -m pytest -m browser --junitxml=reports/tests-browser.xml

test-fast: lint  ## lint, then the quick tier in TEST_JOBS processes: no notebook runs, no whole-submission grading, nothing timed
	$(PARALLEL_ENV) $(BIN)/python -m pytest -m "not slow and not timing" -n $(TEST_JOBS) $(XDIST_ORDER)

lab:  ## open the course in JupyterLab (LAB_ARGS='--port 8890 --no-browser'; as root it adds --allow-root)
	$(BIN)/jupyter lab --notebook-dir=. $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

grade:  ## grade exercises/ (or SUBMISSION=path) and print the score table
	$(BIN)/python -m grader $(SUBMISSION) --report $(REPORT)

exercises:  ## regenerate exercises/ from solutions/ with nbgrader
	$(BIN)/python -m tools.make_exercises

fixtures:  ## recompute the public checks' stored expected values (grader/exercises/exNN/fixtures.safetensors)
	$(BIN)/python -m tools.make_fixtures

check-exercises:  ## fail if exercises/ drifted from solutions/
	$(BIN)/python -m tools.make_exercises --check

bench:  ## measure every lesson's figures; results in bench/results/ (device + torch in the name)
	$(BIN)/python -m coursekit.bench --out bench/results

release:  ## nbgrader release folder + learner kit zip in $(COURSE)/ (WARM=1 ships .cache/warm/*)
	$(BIN)/python -m tools.classroom --course $(COURSE) release $(if $(WARM),--with-cache $(wildcard .cache/warm/*))

collect:  ## copy SUBMISSIONS=dir (dir/<student>/NN_*.ipynb) into $(COURSE)/submitted/
	$(BIN)/python -m tools.classroom --course $(COURSE) collect $(SUBMISSIONS)

autograde:  ## grade submissions into nbgrader's gradebook with the isolated grader (JOBS=n, FORCE=1, ASSIGNMENT=ex02, UNSANDBOXED=1)
	$(BIN)/python -m tools.classroom --course $(COURSE) autograde --jobs $(JOBS) $(if $(FORCE),--force) $(if $(ASSIGNMENT),--assignment $(ASSIGNMENT)) $(if $(UNSANDBOXED),--unsandboxed)

feedback:  ## per-student HTML feedback in $(COURSE)/feedback/
	$(BIN)/python -m tools.classroom --course $(COURSE) feedback

export:  ## grades to $(COURSE)/grades.csv and $(COURSE)/grades_by_check.csv (ASSIGNMENT='ex00 ex02': only those)
	$(BIN)/python -m tools.classroom --course $(COURSE) export $(if $(ASSIGNMENT),--assignment $(ASSIGNMENT))

calibrate:  ## thresholds for this machine from the reference solutions (RUNS=3, FRACTION=0.25)
	$(BIN)/python -m grader calibrate --runs $(RUNS) --fraction $(FRACTION)

speed-trials:  ## how reliably each speed check separates reference from baseline, graded as a class (TRIALS=5)
	$(BIN)/python -m tools.speed_trials --runs $(or $(TRIALS),5) --workers 2

warm-cache:  ## pre-compile lessons + grader graphs, pack them in .cache/warm/, record cold vs warm
	$(BIN)/python -m tools.warm_cache

check:  ## workshop mode: check exercise EX=01 quickly (FULL=1 adds speed) + a progress table
	$(BIN)/python -m grader check $(EX) $(if $(FULL),--full)

batch:  ## grade every submission in BATCH=dir (default $(COURSE)/submitted) into BATCH_OUT (default $(COURSE)/batch), resumably
	$(BIN)/python -m grader batch $(BATCH) --out $(BATCH_OUT) --engine $(ENGINE) $(if $(WORKERS),--workers $(WORKERS)) $(if $(FORCE),--force) $(if $(UNSANDBOXED),--unsandboxed)

gpu-check:  ## the course on a CUDA GPU in resumable steps, results in bench/results/gpu-check-*/ (STEPS='lesson-*', BUDGET=s, REDO=..., PACK=x.tgz)
	$(PY) -m tools.gpu_check $(if $(STEPS),--steps $(STEPS)) $(if $(BUDGET),--budget-s $(BUDGET)) $(if $(REDO),--redo $(REDO)) $(if $(PACK),--pack $(PACK))

gpu-wheels:  ## download into .whl/ the wheels gpu-check needs on a GPU machine with torch and no registry (CPython 3.12)
	$(PY) -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp $(WHEEL_PLATFORMS) \
		-d .whl $$(grep -v '^#' tools/gpu_wheels.txt)

clean:  ## remove caches, traces and reports (keeps .venv)
	rm -rf .cache runs reports .pytest_cache
