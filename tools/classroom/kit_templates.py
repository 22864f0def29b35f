"""The learner kit's own README, Makefile and pyproject.toml."""

from __future__ import annotations

KIT_README = """\
# torch.compile in practice: learner kit

Lessons (`notebooks/`), exercises (`exercises/`) and the public checks of the course's grader.

```bash
make setup      # a .venv with the pinned packages (torch, JupyterLab, ...) and this kit
make lab        # open JupyterLab; start with notebooks/00_orientation.ipynb
make check EX=01   # workshop mode: check exercise 1 quickly, and see your progress on all of them
```

**GPU or not, plain `make setup` is the way**: it installs torch with its CUDA libraries (about 6 GB; they run on a
CPU too, and this is the setup the course is tested with) in a few minutes. pip may print warnings about package
indexes it skips; the setup worked if it ends with a line `C++ compiler for Inductor: ...`. Only if disk space is
short on a machine without an NVIDIA GPU: `make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu` takes a
CPU-only torch and torchvision of the same versions from PyTorch's own index (not tried by the course's authors,
whose machines reach only PyPI; if that index cannot be reached, a plain `make setup` carries on in the same `.venv`).
`make check EX=path/to/01_my_copy.ipynb` checks a notebook kept elsewhere (the progress table then follows it;
the name must start with the exercise's number and an underscore, which is how the grader tells the exercises
apart); `make grade` runs every check in this kit on `exercises/`. {timed}
Without a browser, a notebook runs from the shell: `.venv/bin/jupyter nbconvert --to notebook --execute
--allow-errors exercises/01_cross_entropy_ladder.ipynb --output-dir runs` writes `runs/01_cross_entropy_ladder.ipynb`
with every cell's output (`--allow-errors` runs on past a cell that fails, such as a task not written yet).

In each exercise, replace every `raise NotImplementedError()`. Cells marked *public check* grade that
piece at once; the hidden checks are not in this kit: they run when your instructor grades your work, and
`make check`'s table lists each of them with what it verifies ("graded by your instructor"). The
grader runs only your definitions (imports, `def`, `class`, UPPER_CASE constants), never your demo cells:
a constant the grader needs must be named in UPPER_CASE.

The hidden structural checks (graph breaks, recompiles, syncs and host-built tensors) can be practised on
inputs of your own, untimed: `from coursekit.practice import practice; practice(fn, [args1, args2])` prints
what they count, beside what they usually ask for. Traffic inside your own custom ops is not counted against you
when you name their namespace: `practice(fn, [args1, args2], allow_inside=("ex02::",))` (label the op's body with
`torch.profiler.record_function("ex02::...")`, as exercise 2 says).

If your instructor gave you a compile cache (`cache/`), `make load-cache` puts it in place: the graphs it holds
(your instructor knows which lessons') are then read from it instead of compiled from scratch. It hits only on the
torch version and machine type it was built for, and on a CPU the C++ kernels are rebuilt unless your Python
environment sits at the same path as the one the cache was built in (their cache key names that folder), so a
lesson's first run is faster there, not instant.
"""


def kit_timing_line() -> str:
    """What the kit's README says about timed checks: whether ``FULL=1`` adds any that the kit holds."""
    from grader.registry import load_all

    held = [c.id for c in load_all().values() if c.kind == "speed" and c.public]
    if held:
        return f"`make check EX=01 FULL=1` adds this kit's timed checks ({', '.join(held)})."
    return (
        "Every check in this kit is untimed: speed is graded by your instructor, against the grader's own baseline"
        " (`make check` shows the gain each speed check requires by default)." + _rehearsals()
    )


def _rehearsals() -> str:
    """The README's sentence on the exercises whose lesson ships a ``rehearse.py`` (found, not listed)."""
    from coursekit.lessons import ROOT, lessons

    found = [x for x in lessons() if (ROOT / "coursekit" / "lessons" / x.topic / "rehearse.py").is_file()]
    if not found:
        return ""
    names = [f"{x.number} (`coursekit.lessons.{x.topic}.rehearse`)" for x in found]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    plural = len(names) > 1
    return (
        f" Exercise{'s' if plural else ''} {listed} say{'' if plural else 's'} how to rehearse"
        f" {'their' if plural else 'its'} speed check in your own kernel: a guide on your machine, not a grade."
    )


KIT_MAKEFILE = """\
# The learner kit's entry points. `make setup` first.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EX ?= 01
export PATH := $(abspath $(BIN)):$(PATH)
export TORCHINDUCTOR_CACHE_DIR ?= $(abspath .cache/inductor)

.PHONY: help setup lab check grade load-cache

# TORCH_INDEX=https://download.pytorch.org/whl/cpu: torch and torchvision from PyTorch's CPU-only index first
TORCH_INDEX ?=
TORCH_PINS = $(shell grep -E '^(torch|torchvision)==' requirements.txt)
CPU_HINT = or, without an NVIDIA GPU, a CPU-only torch (no CUDA libraries): make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu

help:  ## list the targets (plain `make` does this; `make setup` installs, about 6 GB)
\t@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 12

setup:  ## create .venv with the pinned dependencies and this kit (TORCH_INDEX=... for a CPU-only torch)
\t@test -x $(BIN)/python || $(if $(TORCH_INDEX),true,$(PYTHON) -m tools.disk_room $(VENV) 7 "make setup" "$(CPU_HINT)")
\t@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
\t$(BIN)/python -m pip install --quiet --upgrade pip
\t@echo "installing torch, torchvision, timm, JupyterLab and the rest of requirements.txt: torch brings its"
\t@echo "CUDA libraries (about 6 GB on disk, a few minutes; pip shows each download; they run on a CPU too; for a"
\t@echo "CPU-only torch: make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu)"
\t$(if $(TORCH_INDEX),$(BIN)/python -m pip install --progress-bar on --index-url $(TORCH_INDEX) $(TORCH_PINS))
\t$(BIN)/python -m pip install --progress-bar on -r requirements.txt -e .
\t$(BIN)/python -m coursekit.toolchain  # the compilers torch.compile builds kernels with: says how to install one

lab:  ## open the course in JupyterLab (LAB_ARGS='--port 8890 --no-browser'; as root it adds --allow-root)
\t$(BIN)/jupyter lab --notebook-dir=. $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

check:  ## check one exercise quickly (EX=01 or EX=path/to/notebook.ipynb; FULL=1: the kit's timed checks, if any)
\t$(BIN)/python -m grader check $(EX) $(if $(FULL),--full)

grade:  ## run every public check on exercises/
\t$(BIN)/python -m grader exercises --report reports/exercises.json

LOAD_ARTIFACTS := import sys, torch; torch.compiler.load_cache_artifacts(open(sys.argv[1], 'rb').read())
load-cache:  ## unpack the compile cache your instructor shipped (cache/*.tar.gz) into .cache/inductor
\t@mkdir -p $(TORCHINDUCTOR_CACHE_DIR)
\t@ls cache/*.tar.gz cache/*.bin 2>/dev/null | grep -q . || { echo "no cache/*.tar.gz or cache/*.bin here"; exit 1; }
\t@for f in cache/*.tar.gz; do [ -f "$$f" ] || continue; tar -xzf "$$f" -C $(TORCHINDUCTOR_CACHE_DIR) && \
\t  echo "unpacked $$f: $$(tar -tzf "$$f" | wc -l) entries into .cache/inductor"; done
\t@for f in cache/*.bin; do [ -f "$$f" ] || continue; \
\t  $(BIN)/python -c "$(LOAD_ARTIFACTS)" "$$f" && echo "loaded $$f into torch's caches"; done
\t@echo "a cache hits only with the torch version and machine type it was built for, which its file names say"
"""

KIT_PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "tcip-learner-kit"
version = "0.1.0"
description = "torch.compile in practice: lessons, exercises and public checks"
requires-python = ">=3.11"  # tomllib (grader.context, coursekit.lessons)
dynamic = ["dependencies"]

[tool.setuptools.dynamic]
dependencies = { file = ["requirements.txt"] }

[tool.setuptools.packages.find]
include = ["coursekit*", "grader*"]
"""
