"""The course as an nbgrader course directory: release, collect, autograde, feedback, export.

    python -m tools.classroom release              # course/release/exNN/ + course/tcip-learner-kit.zip
    python -m tools.classroom collect DIR          # DIR/<student>/**/NN_*.ipynb -> course/submitted/
    python -m tools.classroom autograde [--jobs N] # hidden checks put back; grades into the gradebook
    python -m tools.classroom feedback             # course/feedback/<student>/...: per-check HTML pages
    python -m tools.classroom export               # course/grades.csv and course/grades_by_check.csv

``--course PATH`` (default ``course/``, or ``$COURSE``) is an ordinary nbgrader course
directory; ``course/nbgrader_config.py`` is written on first use and is yours to edit
afterwards.  The gradebook is SQLite (``course/gradebook.db``) unless ``GRADEBOOK_URL``
(any SQLAlchemy URL) or the config file says otherwise.

The learner kit is built from an explicit allow-list: ``coursekit/``, the grader's public
modules (each exercise's contract, probes, public checks and stored fixtures), the released
exercises, the lessons and the requirements. Solutions, hidden checks, reference
implementations, thresholds, calibration files and instructor tools never ship, and the kit
is scanned before it is zipped: for solution code, hidden-test markers, hidden check code,
and any module that defines an exercise's interface names or a reference function.

``autograde`` grades through the same isolated runner as ``python -m grader`` (the notebooks
are never executed) and refuses to run without the sandbox unless ``--unsandboxed`` is given.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import csv
import hashlib
import html
import inspect
import json
import os
import queue
import shutil
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat

from grader import spreadsheet
from tools.make_exercises import KIT_HEADER, SOLUTIONS, generate_assignment, nbgrader_env

TOOLS = Path(__file__).resolve().parent
ROOT = TOOLS.parent

KIT = "tcip-learner-kit"
COURSE_ID = "tcip"
RESULT_MIME = "application/vnd.coursekit.check+json"
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS", "BEGIN MARK SCHEME")
# Grader modules a learner needs to run the public checks in a notebook, `python -m grader` and
# `python -m grader check` (workshop mode). Each exercise's public parts are added by discovery.
PUBLIC_GRADER = (
    "__init__.py",
    "__main__.py",
    "cgroups.py",
    "conftest.py",
    "containment.py",
    "context.py",
    "interface.py",
    "judging.py",
    "learner.py",
    "loader.py",
    "machine_lock.py",
    "notebook.py",
    "numbers.py",
    "preload.py",
    "probing.py",
    "protocol.py",
    "quiet.py",
    "registry.py",
    "report.py",
    "results.py",
    "runner.py",
    "sandbox.py",
    "scan.py",
    "test_submission.py",
    "worker.py",
    "workshop.py",
    "exercises/__init__.py",
)
# instructor-only grader modules that shipped code may import inside a function (a path learners never take)
INSTRUCTOR_MODULES = ("batch", "calibrate", "restore", "nbgrader_hooks", "speed")
PUBLIC_EXERCISE_PARTS = ("__init__.py", "contract.py", "probes.py", "public.py", "fixtures.safetensors")
INSTRUCTOR_ONLY = ("hidden.py", "reference.py", "submissions.py", "thresholds.toml")

CONFIG = """\
# The nbgrader configuration of this course directory, written by tools/classroom.py on first use.
# Edit freely: it is not rewritten while it exists.
import os

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from nbconvert.preprocessors.sanitize import SanitizeHTML
from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, ClearOutput, DeduplicateIds, GetGrades,
                                    IgnorePattern, LimitOutput, OverwriteCells, OverwriteKernelspec, SaveAutoGrades)

from grader.nbgrader_hooks import IsolatedGrade, RestoreLockedCells

c = get_config()  # noqa: F821 - provided by traitlets
here = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.root = here
c.CourseDirectory.course_id = "{course_id}"
# The gradebook: SQLite beside this file unless GRADEBOOK_URL names another SQLAlchemy URL
# (postgresql://user@host/db, mysql+pymysql://...).
c.CourseDirectory.db_url = os.environ.get("GRADEBOOK_URL") or "sqlite:///" + os.path.join(here, "gradebook.db")
c.OverwriteCells.add_missing_cells = True
# Put back deleted locked cells and reset edited ones (reported in a notes cell).
c.Autograde.sanitize_preprocessors = [ClearOutput, DeduplicateIds, OverwriteKernelspec, RestoreLockedCells,
                                      OverwriteCells, CheckCellMetadata]
# The grade comes from the grader's isolated runner (a judge process and a sandboxed worker), never from
# executing the notebook: IsolatedGrade takes the place of nbgrader's Execute and writes each check's verdict
# into its cell, which SaveAutoGrades then records. Each check stops after GRADER_CHECK_TIMEOUT seconds.
c.Autograde.autograde_preprocessors = [IsolatedGrade, IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
                                       SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]
# Feedback pages render each learner's Markdown: HTML in it (a <script>, an <img onerror=...>) is escaped by
# nbconvert's SanitizeHTML (bleach), never run in the browser of whoever opens the page. nbgrader's feedback
# template ignores HTMLExporter.sanitize_html, so the preprocessor joins nbgrader's own two.
c.GenerateFeedback.preprocessors = [GetGrades, CSSHTMLHeaderPreprocessor, SanitizeHTML]
c.SanitizeHTML.enabled = True  # nbconvert's preprocessors are off until enabled
"""

KIT_README = """\
# torch.compile in practice: learner kit

Lessons (`notebooks/`), exercises (`exercises/`) and the public checks of the course's grader.

```bash
make setup      # a .venv with the pinned packages (torch, JupyterLab, ...) and this kit
make lab        # open JupyterLab; start with notebooks/00_orientation.ipynb
make check EX=01   # workshop mode: check exercise 1 quickly, and see your progress on all of them
```

`make setup` installs torch with its CUDA libraries (about 5 GB; they run on a CPU too) and takes a few
minutes; on a machine without an NVIDIA GPU, `make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu` takes
torch and torchvision from PyTorch's CPU-only index instead (no CUDA libraries; the same versions).
`make check EX=path/to/01_my_copy.ipynb` checks a notebook kept elsewhere (the progress table then follows it;
the name must start with the exercise's number and an underscore, which is how the grader tells the exercises
apart); `make grade` runs every check in this kit on `exercises/`. {timed}

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

If your instructor gave you a compile cache (`cache/`), `make load-cache` puts it in place so the first
`torch.compile` of each lesson starts warm.
"""


def kit_timing_line() -> str:
    """What the kit's README says about timed checks: whether ``FULL=1`` adds any that the kit holds."""
    from grader.registry import load_all

    held = [c.id for c in load_all().values() if c.kind == "speed" and c.public]
    if held:
        return f"`make check EX=01 FULL=1` adds this kit's timed checks ({', '.join(held)})."
    return (
        "Every check in this kit is untimed: speed is graded by your instructor, against the grader's own baseline"
        " (`make check` shows the gain each speed check requires by default)."
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

help:  ## list the targets (plain `make` does this; `make setup` installs, about 5 GB)
\t@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 12

setup:  ## create .venv with the pinned dependencies and this kit (TORCH_INDEX=... for a CPU-only torch)
\t@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
\t$(BIN)/python -m pip install --quiet --upgrade pip
\t@echo "installing torch, torchvision, timm, JupyterLab and the rest of requirements.txt: torch brings its"
\t@echo "CUDA libraries (about 5 GB on disk, a few minutes; pip shows each download; they run on a CPU too; for a"
\t@echo "CPU-only torch: make setup TORCH_INDEX=https://download.pytorch.org/whl/cpu)"
\t$(if $(TORCH_INDEX),$(BIN)/python -m pip install --progress-bar on --index-url $(TORCH_INDEX) $(TORCH_PINS))
\t$(BIN)/python -m pip install --progress-bar on -r requirements.txt -e .
\t$(BIN)/python -m coursekit.toolchain  # torch.compile builds kernels with a C++ compiler: says how to install one

lab:  ## open the course in JupyterLab (LAB_ARGS='--port 8890 --no-browser'; as root it adds --allow-root)
\t$(BIN)/jupyter lab --notebook-dir=. $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

check:  ## check one exercise quickly (EX=01 or EX=path/to/notebook.ipynb; FULL=1: the kit's timed checks, if any)
\t$(BIN)/python -m grader check $(EX) $(if $(FULL),--full)

grade:  ## run every public check on exercises/
\t$(BIN)/python -m grader exercises --report reports/exercises.json

LOAD_ARTIFACTS := import sys, torch; torch.compiler.load_cache_artifacts(open(sys.argv[1], 'rb').read())
load-cache:  ## unpack the compile cache your instructor shipped (cache/*.tar.gz) into .cache/inductor
\tmkdir -p $(TORCHINDUCTOR_CACHE_DIR)
\tfor f in cache/*.tar.gz; do [ -f "$$f" ] && tar -xzf "$$f" -C $(TORCHINDUCTOR_CACHE_DIR); done; true
\tfor f in cache/*.bin; do [ -f "$$f" ] && $(BIN)/python -c "$(LOAD_ARTIFACTS)" "$$f"; done; true
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


# --------------------------------------------------------------------------------------------- course


def course_dir(path: str | None) -> Path:
    return Path(path or os.environ.get("COURSE") or ROOT / "course").resolve()


def ensure_course(course: Path) -> None:
    """Create the course folder and its ``nbgrader_config.py`` (kept once it exists)."""
    course.mkdir(parents=True, exist_ok=True)
    config = course / "nbgrader_config.py"
    if not config.exists():
        config.write_text(CONFIG.format(course_id=COURSE_ID))


def db_url(course: Path) -> str:
    """The gradebook URL, read from the course's config exactly as nbgrader reads it."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", path=str(course)).load_config()
    return str(config.CourseDirectory.db_url)


NBGRADER_WARNINGS = "ignore::Warning:nbgrader.api"


def course_env() -> dict[str, str]:
    """nbgrader's environment, with this checkout first on ``PYTHONPATH``: nbgrader runs in the course folder, where
    ``grader`` and ``coursekit`` would otherwise come from wherever the virtual environment's editable install points
    (another clone, when two share one ``.venv``), and grade with that clone's checks."""
    env = nbgrader_env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    # a course config that fails to load stops nbgrader: traitlets would log it and go on with nbgrader's defaults,
    # whose Execute step runs each submission in a kernel, unsandboxed, in place of the grader's isolated runner
    env["TRAITLETS_APPLICATION_RAISE_CONFIG_FILE_ERROR"] = "1"
    # nbgrader's gradebook code sets off SQLAlchemy's "not in session, add operation ... will not proceed" warnings
    # on every submission it records, three per learner: nbgrader's own noise, not the course's
    env["PYTHONWARNINGS"] = ",".join(w for w in (env.get("PYTHONWARNINGS"), NBGRADER_WARNINGS) if w)
    return env


def nbgrader(
    course: Path, *args: str, quiet: bool = False, env: dict | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess:
    """Run ``nbgrader ARGS`` in the course folder; raise with its output if it fails or outlasts ``timeout`` s."""
    cmd = [sys.executable, "-m", "nbgrader", *args]
    try:
        proc = subprocess.run(
            cmd, cwd=course, env={**course_env(), **(env or {})}, text=True, capture_output=quiet, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise SystemExit(f"`nbgrader {' '.join(args)}` took over {timeout:g} s and was stopped") from None
    if proc.returncode:
        raise SystemExit(
            f"`nbgrader {' '.join(args)}` failed (exit {proc.returncode})"
            + (f":\n{proc.stdout}{proc.stderr}" if quiet else "")
        )
    return proc


def assignments(course: Path) -> list[str]:
    return sorted(p.name for p in (course / "source").glob("ex[0-9][0-9]") if p.is_dir())


# -------------------------------------------------------------------------------------------- release


def _imports(path: Path, module_level: bool = False) -> set[str]:
    """The modules ``path`` imports; ``module_level``: only those imported when it is imported (not inside a
    function, where an import runs only when the function is called)."""
    names = set()
    tree = ast.parse(path.read_text())
    nodes = ast.walk(tree)
    if module_level:
        lazy = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for inner in ast.walk(node)
        }
        nodes = (node for node in ast.walk(tree) if id(node) not in lazy)
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def _kit_test(path: Path) -> bool:
    """The lessons' own tests (``test_lesson.py``, ``conftest.py``) stay with the instructor: some import
    hidden checks, and a learner's pytest should not collect them."""
    return path.name.startswith("test_") or path.name == "conftest.py"


def kit_files() -> tuple[dict[str, Path], list[str]]:
    """``{path in the kit: source file}`` for everything that ships, and warnings for the instructor."""
    from grader.exercises import exercise_ids

    files: dict[str, Path] = {}
    warnings: list[str] = []
    for path in sorted((ROOT / "coursekit").rglob("*")):
        if path.suffix in (".py", ".toml") and "__pycache__" not in path.parts and not _kit_test(path):
            files[path.relative_to(ROOT).as_posix()] = path
    grader = ROOT / "grader"
    for name in PUBLIC_GRADER:
        if (grader / name).is_file():
            files[f"grader/{name}"] = grader / name
    for exercise in exercise_ids():
        folder = grader / "exercises" / exercise
        for name in PUBLIC_EXERCISE_PARTS:
            if (folder / name).is_file():
                files[f"grader/exercises/{exercise}/{name}"] = folder / name
        if not (folder / "public.py").is_file():
            warnings.append(
                f"{exercise}: no public.py, so none of its checks ship and its public check cells will "
                "say so in the kit"
            )
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        files[f"notebooks/{path.name}"] = path
    return files, warnings


def kit_requirements() -> str:
    """requirements.txt without the instructor-only lines (marked ``# instructor``)."""
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return "\n".join(line for line in lines if "# instructor" not in line) + "\n"


def _closed_imports(stage: Path) -> list[str]:
    """Shipped grader/coursekit modules importing a grader/coursekit module that does not ship."""
    missing = []
    for path in sorted(stage.rglob("*.py")):
        eager = _imports(path, module_level=True)
        for module in _imports(path):
            if module.split(".")[0] in ("grader", "coursekit") and module not in ("grader", "coursekit"):
                rel = module.replace(".", "/")
                if not ((stage / f"{rel}.py").is_file() or (stage / rel / "__init__.py").is_file()):
                    if module in eager or module.removeprefix("grader.") not in INSTRUCTOR_MODULES:
                        missing.append(f"{path.relative_to(stage)} imports {module}, which does not ship")
    return missing


def _text_files(stage: Path) -> dict[Path, str]:
    out = {}
    for path in stage.rglob("*"):
        if path.is_file():
            try:
                out[path] = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
    return out


def _contains(text: str, line: str) -> bool:
    """``line`` occurs in ``text`` as it is, or as a notebook's JSON stores it."""
    return line in text or json.dumps(line)[1:-1] in text


def public_baseline() -> str:
    """The text of everything that is public by design: the files the allow-list ships, and exercises/."""
    files, _ = kit_files()
    sources = [*files.values(), *(ROOT / "exercises").glob("[0-9][0-9]_*.ipynb")]
    return "\n".join(p.read_text() for p in sources if p.suffix in (".py", ".ipynb"))


def solution_lines(baseline: str) -> set[str]:
    """Lines of code inside the solutions' ``### BEGIN SOLUTION`` regions that occur nowhere in the public
    material (``baseline``): if one of them ships, a solution leaked."""
    found = set()
    for path in SOLUTIONS.glob("[0-9][0-9]_*.ipynb"):
        for cell in nbformat.read(path, as_version=4).cells:
            inside = False
            for line in cell.source.splitlines():
                text = line.strip()
                if "BEGIN SOLUTION" in text or "END SOLUTION" in text:
                    inside = "BEGIN" in text
                elif inside and len(text) >= 12 and not _contains(baseline, text):
                    found.add(text)
    return found


def hidden_check_lines(baseline: str) -> dict[str, set[str]]:
    """For each hidden check: its ``def`` line and the lines of its code that occur in no public material."""
    from grader.registry import load_all

    out = {}
    for cid, check in load_all().items():
        if check.public:
            continue
        lines = {line.strip() for line in inspect.getsource(check.fn).splitlines()}
        what = (check.fn.__doc__ or "").strip().split("\n")[0].strip()  # id and this ship by design (instructor_checks)
        out[cid] = {f"def {check.fn.__name__}("} | {
            s for s in lines if len(s) >= 16 and not _contains(baseline, s) and s.strip('",') not in (what, cid)
        }
    return out


def verify_kit(stage: Path) -> list[str]:
    """Every way the kit could leak a solution or a hidden check, and any import it cannot satisfy."""
    problems = []
    texts = _text_files(stage)
    for path, text in texts.items():
        rel = path.relative_to(stage)
        for marker in MARKERS:
            if marker in text:
                problems.append(f"{rel}: contains `### {marker}`")
    for path in (stage / "grader" / "exercises").rglob("*"):
        if path.name in INSTRUCTOR_ONLY:
            problems.append(f"{path.relative_to(stage)} ships, but hidden checks and references are instructor-only")
    for name in ("thresholds.toml", "batch.py", "calibrate.py", "restore.py", "nbgrader_hooks.py"):
        if (stage / "grader" / name).exists():
            problems.append(f"grader/{name} ships, but it is instructor-only")
    if (stage / "grader" / "calibration").exists() or (stage / "solutions").exists():
        problems.append("calibration files or solutions/ ship")
    baseline = public_baseline()
    leaks = solution_lines(baseline)
    hidden = hidden_check_lines(baseline)
    for path, text in texts.items():
        rel = path.relative_to(stage)
        problems += [f"{rel}: contains solution code `{s}`" for s in sorted(leaks) if _contains(text, s)]
        for cid, lines in hidden.items():
            problems += [
                f"{rel}: contains code of hidden check {cid}: `{s}`" for s in sorted(lines) if _contains(text, s)
            ]
    return problems + forbidden_definitions(stage)[0] + _closed_imports(stage)


def _defined_names(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


def reference_names() -> set[str]:
    """Every function and class the exercises' ``reference.py`` modules define."""
    names: set[str] = set()
    for path in (ROOT / "grader" / "exercises").glob("ex[0-9][0-9]/reference.py"):
        names |= {n.name for n in ast.parse(path.read_text()).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return names


def forbidden_definitions(stage: Path) -> tuple[list[str], list[str]]:
    """(problems, warnings): a shipped module that defines an exercise's interface name or a reference function
    stops the release, unless the name is one a contract lists in ``SHOWN_IN_LESSONS`` (then a warning with its
    stated reason). Lesson notebooks are teaching material: what their cells define is reported as warnings (that
    a lesson cell must not solve an exercise is tested by pasting, not by names)."""
    from IPython.core.inputtransformer2 import TransformerManager

    from grader.interface import INTERFACE, SHOWN_IN_LESSONS

    interface = {name: ex for ex, names in INTERFACE.items() for name in names}
    allowed = {name: reason for reasons in SHOWN_IN_LESSONS.values() for name, reason in reasons.items()}
    references = reference_names()
    sources: list[tuple[str, str]] = []
    for path in sorted(stage.rglob("*.py")):
        sources.append((str(path.relative_to(stage)), path.read_text()))
    transformer = TransformerManager()
    for path in sorted((stage / "notebooks").glob("*.ipynb")):
        for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
            if cell.cell_type == "code":
                sources.append((f"{path.relative_to(stage)} cell {i}", transformer.transform_cell(cell.source)))
    problems, warnings = [], []
    for where, text in sources:
        found = problems if where.endswith(".py") else warnings
        for name in sorted(_defined_names(text)):
            if name in references:
                found.append(f"{where} defines {name}, a reference function of the grader")
            elif name in interface and name in allowed:
                warnings.append(
                    f"note: {where} defines {name} ({interface[name]}'s interface), as meant: {allowed[name]}"
                )
            elif name in interface:
                found.append(f"{where} defines {name}, a name {interface[name]}'s learners must write")
    return problems, warnings


def build_kit(course: Path, released: list[Path], caches: list[Path]) -> tuple[Path, Path, list[str]]:
    """Stage the learner kit under ``course/learner-kit/`` and zip it; returns (folder, zip, warnings)."""
    from grader.exercises import exercise_ids
    from grader.registry import INSTRUCTOR_INDEX, instructor_index

    files, warnings = kit_files()
    stage = course / "learner-kit" / KIT
    if stage.parent.exists():
        shutil.rmtree(stage.parent)
    stage.mkdir(parents=True)
    for rel, src in files.items():
        (stage / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, stage / rel)
    (stage / "exercises").mkdir()
    for notebook in released:
        shutil.copy2(notebook, stage / "exercises" / notebook.name)
    for cache in caches:
        (stage / "cache").mkdir(exist_ok=True)
        shutil.copy2(cache, stage / "cache" / cache.name)
    for exercise in exercise_ids():  # what the kit's hidden checks verify, so its tables can list them
        index = instructor_index(exercise)
        if index["checks"]:
            folder = stage / "grader" / "exercises" / exercise
            folder.mkdir(parents=True, exist_ok=True)
            (folder / INSTRUCTOR_INDEX).write_text(json.dumps(index, indent=1) + "\n")
    (stage / "requirements.txt").write_text(kit_requirements())
    (stage / "README.md").write_text(KIT_README.replace("{timed}", kit_timing_line()))
    (stage / "Makefile").write_text(KIT_MAKEFILE)
    (stage / "pyproject.toml").write_text(KIT_PYPROJECT)
    problems = verify_kit(stage)
    warnings += forbidden_definitions(stage)[1]
    if problems:
        raise SystemExit("the learner kit would leak or break; nothing was zipped:\n  " + "\n  ".join(problems))
    archive = course / f"{KIT}.zip"
    tmp = archive.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(stage.rglob("*")):
            if path.is_file():
                zf.write(path, Path(KIT) / path.relative_to(stage))
    tmp.replace(archive)
    return stage, archive, warnings


def release(course: Path, caches: list[Path]) -> Path:
    """nbgrader's release folder for every exercise, and the learner kit zip."""
    ensure_course(course)
    url = db_url(course)
    released = []
    for solution in sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb")):
        released.append(generate_assignment(course, solution, url, KIT_HEADER))
        print(f"released {released[-1].relative_to(course)}")
    stage, archive, warnings = build_kit(course, released, caches)
    for warning in warnings:  # a note needs nothing done
        print(warning if warning.startswith("note: ") else f"warning: {warning}", file=sys.stderr)
    size = archive.stat().st_size / 1024**2
    print(f"wrote {archive} ({size:.1f} MiB; unpacked in {stage}); checked: no solution code, no hidden checks")
    return archive


# -------------------------------------------------------------------------------------- collect, grade


PATTERN_CHARACTERS = frozenset("*?[]")


def id_problem(student: str) -> str | None:
    """Why ``student`` (a folder's name) cannot be a learner id for nbgrader, or None. nbgrader reads an id as a file
    pattern: a learner named ``*`` selected every classmate's folder, and a classmate whose grading then failed half
    way was skipped as graded ever after (red team, session 32)."""
    found = sorted(PATTERN_CHARACTERS & set(student))
    if found:
        return (
            f"the learner id {student!r} holds {' '.join(found)}, which nbgrader reads as a file pattern matching "
            "classmates' folders: rename the folder"
        )
    return None


def autograded_notebook(course: Path, student: str, assignment: str) -> bool:
    """Whether nbgrader wrote ``student``'s graded notebook for ``assignment`` (its folder alone is left behind by a
    grading that failed half way, and nbgrader then skips the submission as graded)."""
    return any((course / "autograded" / student / assignment).glob("*.ipynb"))


def collect(course: Path, source: Path) -> int:
    """Copy ``source/<student>/**/NN_*.ipynb`` into nbgrader's ``submitted/<student>/exNN/<released name>``. Only
    notebook files are copied: a symbolic link (to a solution, to a classmate's work), a folder, a pipe or a device
    in a student's folder is skipped with a warning, and so is a student folder that is a link."""
    from grader.interface import NOTEBOOKS, exercise_for
    from grader.loader import NotebookError, submission_bytes

    count = 0
    for student in sorted(p for p in source.iterdir() if p.is_dir()):
        if student.is_symlink():
            print(f"warning: {student}: a student folder that is a symbolic link; skipped", file=sys.stderr)
            continue
        if problem := id_problem(student.name):
            print(f"warning: {student}: {problem}; skipped", file=sys.stderr)
            continue
        for notebook in sorted(student.rglob("*.ipynb")):  # rglob follows no linked folder
            if ".ipynb_checkpoints" in notebook.parts:
                continue
            exercise = exercise_for(notebook)
            if exercise is None:
                print(f"warning: {notebook}: not an exercise notebook (NN_topic.ipynb); skipped", file=sys.stderr)
                continue
            try:
                content = submission_bytes(notebook)
            except NotebookError as exc:
                print(f"warning: {notebook}: {exc}; skipped", file=sys.stderr)
                continue
            target = course / "submitted" / student.name / exercise / NOTEBOOKS[exercise]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)  # a link left there earlier is replaced, never written through
            target.write_bytes(content)
            with contextlib.suppress(OSError):
                modified = notebook.lstat().st_mtime
                os.utime(target, (modified, modified))
            count += 1
    print(f"collected {count} notebook(s) into {course / 'submitted'}")
    return count


def autograde(course: Path, which: list[str] | None, jobs: int, force: bool, unsandboxed: bool = False) -> None:
    """nbgrader autograde, graded by the isolated runner: hidden checks put back, locked cells restored, each
    check's verdict into the gradebook. Without the sandbox it refuses, unless ``unsandboxed``."""
    from grader import cgroups
    from grader.batch import write_report
    from grader.nbgrader_hooks import UNSANDBOXED_ENV
    from grader.runner import SandboxRequired, sandbox_report

    try:
        report = sandbox_report("off" if unsandboxed else "require")
    except SandboxRequired as exc:
        raise SystemExit(f"autograde: {exc}") from None
    print(f"learner code: {report.describe()}; {cgroups.describe()}", flush=True)
    ensure_course(course)
    env = {UNSANDBOXED_ENV: "1"} if unsandboxed else {}
    jobs, gpus = gpu_jobs(jobs)
    where = f", one GPU each ({', '.join(gpus)})" if gpus and jobs > 1 else ""
    slots: queue.SimpleQueue[dict[str, str]] = queue.SimpleQueue()
    for slot in share_slots(jobs, gpus):  # one for each of the pool's threads: no two processes share a GPU
        slots.put(slot)
    failed: list[str] = []
    refused: list[str] = []
    ledger = GradedLedger(course)
    refusals = refused_submissions(course)

    def run(assignment: str, group: list[str], students: list[str], extra: list[str]) -> None:
        """nbgrader autograde for ``group`` of the submitted ``students``, in ``jobs`` processes at most."""
        if jobs <= 1:
            for share in shares(group, 1):  # the whole group in one process, unless an id holds a comma
                try:
                    nbgrader(course, "autograde", assignment, *extra, *share_options(share, students), env=env)
                except SystemExit as exc:  # a submission nbgrader could not process: the others still grade
                    failed.append(f"{assignment}: {exc}")
            return

        def grade_share(selection: list[str]) -> None:
            slot = slots.get()
            try:
                nbgrader(course, "autograde", assignment, *extra, *selection, env={**env, **slot})
            finally:
                slots.put(slot)

        with _gradebook(course):  # the course's row, made once: parallel nbgrader processes would race to insert it
            pass
        with ThreadPoolExecutor(jobs) as pool:
            selections = [share_options(share, students) for share in shares(group, jobs)]
            for outcome in [pool.submit(grade_share, selection) for selection in selections]:
                try:
                    outcome.result()
                except SystemExit as exc:
                    failed.append(f"{assignment}: {exc}")

    for assignment in which or assignments(course):
        students = sorted(p.parent.name for p in (course / "submitted").glob(f"*/{assignment}") if p.is_dir())
        digests, unreadable = read_submissions(course, assignment, students)
        refused += [
            f"{assignment}  {student}: {refused_note(course, assignment, student, why)}"
            for student, why in unreadable.items()
        ]
        refusals[assignment] = unreadable
        write_report(course / REFUSED_FILE, refusals)
        if unreadable:  # in the gradebook, so that nbgrader's export lists them
            with _gradebook(course) as gb:
                for student in unreadable:
                    gb.update_or_create_student(student)
        gradable = [s for s in students if s not in unreadable]
        if not gradable:
            continue
        print(f"autograding {assignment}: {len(gradable)} submission(s), {jobs} at a time{where}", flush=True)
        graded_before = {s for s in gradable if autograded_notebook(course, s, assignment)}
        # handed in again since it was graded (nbgrader would skip it as graded): regraded, whatever FORCE says
        again = [s for s in gradable if ledger.get(assignment, s) not in (None, digests[s])]
        if again and not force:
            print(f"  handed in again since graded, so graded again: {', '.join(again)}", flush=True)
        # a folder and no graded notebook: a grading that failed half way, which nbgrader would skip as graded
        half = [s for s in gradable if s not in graded_before and (course / "autograded" / s / assignment).is_dir()]
        if half and not force:
            print(f"  left half graded by an earlier run, so graded again: {', '.join(half)}", flush=True)
        forced = gradable if force else [s for s in gradable if s in again or s in half]
        for group, extra in ((forced, ["--force"]), ([s for s in gradable if s not in forced], [])):
            if group:
                run(assignment, group, students, extra)
        unknown = [s for s in graded_before if s not in forced and ledger.get(assignment, s) is None]
        if unknown:  # graded before this course kept a record: taken as graded as they are now
            print(
                f"  graded before autograde kept a record of what it graded: {', '.join(sorted(unknown))}; if any "
                "was handed in again since, `make autograde FORCE=1` once",
                flush=True,
            )
        for student in gradable:  # recorded only where nbgrader wrote the graded notebook
            if autograded_notebook(course, student, assignment) and (
                student in forced or student not in graded_before or student in unknown
            ):
                ledger.set(assignment, student, digests[student])
        ledger.save()
    graded = which or assignments(course)
    print("\n".join(["points in the gradebook:", *autograde_summary(course, graded)]), flush=True)
    if refused:
        print(
            "\n".join(
                [
                    "not autograded (no notebook nbgrader may read; `make export` lists them, and `make feedback`"
                    " tells their learners):",
                    *refused,
                ]
            )
            + "\n",
            file=sys.stderr,
            flush=True,
        )
    if failed:
        raise SystemExit(
            "autograde: nbgrader reported errors (nbgrader's log above names each student; the others were graded, "
            "and `make autograde` again retries what is missing):\n  " + "\n  ".join(failed)
        )


def read_submissions(course: Path, assignment: str, students: list[str]) -> tuple[dict[str, str], dict[str, str]]:
    """``({student: sha256 of the submission's notebooks}, {student: why})``, the second for submissions nbgrader
    must not open: a notebook in ``submitted/<student>/<assignment>/`` that is no regular file, is over the size
    limit or holds too many JSON values to parse (nbgrader reads every notebook whole before the grader sees it), or
    a student or assignment folder that is a symbolic link. ``make collect`` checks what it copies; nbgrader's own
    exchange copies whatever was handed in."""
    from grader.loader import NotebookError, check_size, submission_bytes

    digests, unreadable = {}, {}
    for student in students:
        folder = course / "submitted" / student / assignment
        if problem := id_problem(student):
            unreadable[student] = problem
            continue
        if folder.parent.is_symlink() or folder.is_symlink():
            unreadable[student] = f"{folder.relative_to(course)} is a symbolic link, not a submission"
            continue
        digest = hashlib.sha256()
        for notebook in sorted(folder.glob("*.ipynb")):
            try:
                content = submission_bytes(notebook)
                check_size(content, notebook.name)
            except NotebookError as exc:
                unreadable[student] = str(exc)
                break
            digest.update(f"{notebook.name}\0{len(content)}\0".encode() + content)
        else:
            digests[student] = digest.hexdigest()
    return digests, unreadable


class GradedLedger:
    """What each submission held when it was autograded (``.tcip-autograded.json`` in the course folder), so a
    notebook handed in again after grading is graded again: nbgrader itself skips any submission it graded before."""

    def __init__(self, course: Path) -> None:
        self.path = course / ".tcip-autograded.json"
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            data = {}
        self.data: dict[str, dict[str, str]] = data if isinstance(data, dict) else {}

    def get(self, assignment: str, student: str) -> str | None:
        found = self.data.get(assignment, {})
        return found.get(student) if isinstance(found, dict) else None

    def set(self, assignment: str, student: str, digest: str) -> None:
        if not isinstance(self.data.get(assignment), dict):
            self.data[assignment] = {}
        self.data[assignment][student] = digest

    def save(self) -> None:
        from grader.batch import write_report  # atomic: a stopped autograde never leaves half a record

        write_report(self.path, self.data)


REFUSED_FILE = ".tcip-not-autograded.json"


def refused_submissions(course: Path) -> dict[str, dict[str, str]]:
    """``{assignment: {student: why}}``: the latest submissions autograde could not hand to nbgrader (written by
    ``autograde``), which ``export`` lists and ``feedback`` explains to their learners."""
    try:
        data = json.loads((course / REFUSED_FILE).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {a: {s: str(w) for s, w in v.items()} for a, v in data.items() if isinstance(v, dict)}


def refused_note(course: Path, assignment: str, student: str, why: str) -> str:
    """What a refused submission means for its learner's grade: zero, or an earlier submission's grade kept."""
    if autograded_notebook(course, assignment=assignment, student=student):
        return f"the latest submission was not graded ({why}); the grade of an earlier submission stands"
    return f"the submission was not graded ({why}); it scores zero until a notebook is handed in"


def gpu_jobs(jobs: int, gpus: list[str] | None = None) -> tuple[int, list[str]]:
    """How many nbgrader processes to run at once, and on CUDA the GPUs they take. Grading on CUDA, each process
    gets a GPU of its own, as a ``grader batch`` slot does: on a shared one, a submission that held the GPU's
    memory would fail a classmate's checks with out-of-memory errors, and two honest full-size gradings may not
    fit beside each other. So ``jobs`` is cut to the GPUs visible (``CUDA_VISIBLE_DEVICES`` respected), with a
    printed reason; on CPU ``gpus`` is empty and ``jobs`` stands."""
    if gpus is None:
        from coursekit.profile import get_profile
        from grader.batch import cuda_slots

        gpus = cuda_slots(None) if get_profile().device_class == "cuda" else []
    if gpus and jobs > len(gpus):
        print(
            f"autograde: {jobs} jobs asked, but on CUDA each takes a GPU of its own and {len(gpus)} "
            f"{'is' if len(gpus) == 1 else 'are'} visible: grading {len(gpus)} at a time",
            flush=True,
        )
        jobs = len(gpus)
    return jobs, gpus[:jobs] if gpus else []


def share_slots(count: int, gpus: list[str]) -> list[dict[str, str]]:
    """The environment each of ``count`` nbgrader processes adds: its own GPU on CUDA, nothing on CPU."""
    return [{"CUDA_VISIBLE_DEVICES": gpus[i]} if gpus else {} for i in range(count)]


def shares(students: list[str], jobs: int) -> list[list[str]]:
    """``students`` dealt round-robin to ``jobs`` nbgrader processes, each grading its share one after another: a
    process pays for starting Python, torch and the grader's fork server once (about 15 s of CPU on 2 cores), not once
    per learner. With a comma in a student id (nbgrader's list separator), one process per student, as before."""
    if any("," in s for s in students):
        return [[s] for s in students]
    return [share for share in (students[i::jobs] for i in range(jobs)) if share]


def share_options(share: list[str], students: list[str]) -> list[str]:
    """nbgrader's options that select ``share`` of the submitted ``students``."""
    if len(share) == 1:
        return [f"--student={share[0]}"]
    others = sorted(set(students) - set(share))
    return [f"--CourseDirectory.student_id_exclude={','.join(others)}"] if others else []


def autograde_summary(course: Path, graded: list[str]) -> list[str]:
    """One line per learner and assignment of ``graded``: points from the gradebook, and how many checks failed."""
    totals: dict[tuple[str, str], list[float]] = {}
    for row in graded_scores(course):
        if row["assignment"] in graded:
            total = totals.setdefault((row["assignment"], row["student"]), [0.0, 0.0, 0])
            total[0] += float(row["points"] or 0)
            total[1] += float(row["max_points"] or 0)
            total[2] += row["passed"] is False
    width = max((len(student) for _, student in totals), default=0)
    return [
        f"  {assignment}  {student:{width}s}  {got:g} / {most:g} points"
        + (f", {failed:g} check(s) failed" if failed else "")
        for (assignment, student), (got, most, failed) in sorted(totals.items())
    ] or ["  nothing graded yet"]


def check_records(notebook: Path) -> tuple[dict[str, dict], list[str]]:
    """``{check id: record}`` from an autograded notebook's check cells, and the grader's notes on it."""
    from grader.restore import read_notes

    nb = nbformat.read(notebook, as_version=4)
    records = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade"):
            continue
        cid = meta["grade_id"].replace("-", ".")
        record = next(
            (
                o["data"][RESULT_MIME]
                for o in cell.get("outputs", [])
                if o.get("output_type") == "display_data" and RESULT_MIME in o.get("data", {})
            ),
            None,
        )
        if record is None:
            error = next((o for o in cell.get("outputs", []) if o.get("output_type") == "error"), None)
            why = (
                f"the cell stopped before the check ran: {error['ename']}: {error['evalue']}"
                if error
                else "the check did not run"
            )
            record = {
                "id": cid,
                "passed": False,
                "points": 0,
                "max_points": meta.get("points", 0),
                "measured": None,
                "required": None,
                "message": why,
                "kind": "",
                "title": "",
            }
        records[cid] = record
    return records, read_notes(nb)


def _gradebook(course: Path):
    from nbgrader.api import Gradebook

    return Gradebook(db_url(course), COURSE_ID)


def graded_scores(course: Path) -> list[dict]:
    """One row per (student, assignment, check) from the gradebook, joined with the check records."""
    from nbgrader.api import MissingEntry

    rows = []
    with _gradebook(course) as gb:
        for assignment in gb.assignments:
            for notebook in assignment.notebooks:
                for student in gb.students:
                    path = course / "autograded" / student.id / assignment.name / f"{notebook.name}.ipynb"
                    records, notes = check_records(path) if path.is_file() else ({}, [])
                    for cell in notebook.grade_cells:
                        try:
                            grade = gb.find_grade(cell.name, notebook.name, assignment.name, student.id)
                        except MissingEntry:
                            continue
                        record = records.get(cell.name.replace("-", "."), {})
                        rows.append(
                            {
                                "student": student.id,
                                "assignment": assignment.name,
                                "check": cell.name.replace("-", "."),
                                "kind": record.get("kind", ""),
                                "points": grade.score,
                                "max_points": grade.max_score,
                                "passed": record.get("passed"),
                                "measured": record.get("measured"),
                                "required": record.get("required"),
                                "thresholds": record.get("thresholds"),
                                "message": record.get("message", ""),
                                "notes": "; ".join(notes),
                            }
                        )
    return rows


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em;max-width:80em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:.3em .6em;vertical-align:top;text-align:left}}.pass{{color:#070}}
.fail{{color:#b00;font-weight:bold}}.notes{{background:#fff6d6;padding:.5em 1em}}</style></head>
<body>{body}</body></html>
"""


def feedback_page(
    student: str,
    assignment: str,
    records: dict[str, dict],
    scores: dict[str, float],
    notes: list[str],
    notebook_html: str | None,
) -> str:
    """One learner's results for one exercise: each check, measured vs required, and what to fix."""
    from grader.numbers import format_value

    total = sum(scores.values())
    possible = sum(float(r.get("max_points", 0)) for r in records.values())
    parts = [
        f"<h1>{html.escape(assignment)}: {total:g} / {possible:g} points</h1>"
        if records
        else f"<h1>{html.escape(assignment)}: not graded</h1>",
        f"<p>Student <b>{html.escape(student)}</b>. Each row is one check; the message says what to fix.</p>"
        if records
        else f"<p>Student <b>{html.escape(student)}</b>. Hand in the exercise's notebook file itself (not a link, "
        "within the size limit) and ask for a regrade.</p>",
    ]
    if notes:
        parts.append(
            '<div class="notes"><b>Notes from the grader</b><ul>'
            + "".join(f"<li>{html.escape(n)}</li>" for n in notes)
            + "</ul></div>"
        )
    rows = []
    for cid, r in records.items():
        kind = r.get("kind", "")
        ok = bool(r.get("passed"))
        points = scores.get(cid, r.get("points", 0))
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{c}</td>"
                for c in (
                    f"<code>{html.escape(cid)}</code><br><small>{html.escape(r.get('title') or '')}</small>",
                    html.escape(kind),
                    f"{points:g} / {float(r.get('max_points', 0)):g}",
                    '<span class="pass">pass</span>' if ok else '<span class="fail">FAIL</span>',
                    format_value(r.get("measured"), kind, r.get("required")),
                    format_value(r.get("required"), kind, r.get("measured")),
                    html.escape(r.get("thresholds") or ""),
                    html.escape(r.get("message") or "").replace("\n", "<br>"),
                )
            )
            + "</tr>"
        )
    if rows:
        parts.append(
            "<table><tr><th>check</th><th>kind</th><th>points</th><th>result</th><th>measured</th>"
            "<th>required</th><th>thresholds</th><th>message</th></tr>" + "".join(rows) + "</table>"
        )
    if notebook_html:
        parts.append(
            f"<p>Your graded notebook, with each check cell's result (the grader runs only your definitions, "
            f'never your demo cells, so their outputs are not kept): <a href="{html.escape(notebook_html)}">'
            f"{html.escape(notebook_html)}</a></p>"
        )
    return PAGE.format(title=html.escape(f"{assignment} feedback for {student}"), body="\n".join(parts))


FEEDBACK_START_SECONDS = 60  # nbgrader's start, and a class's first notebook
FEEDBACK_SECONDS = 10  # each graded notebook's page, with room: one renders in about a second on 2 cores


def notebook_feedback(course: Path, assignment: str) -> list[str]:
    """nbgrader's page of each graded notebook of ``assignment``, within a time budget; the learners it could not
    render in time, each with why. A learner's Markdown can take nbconvert minutes to render (red team, session 32:
    80 KB of ``[a](`` took 20 s, and the cost grows as its square), which stalled the whole class's feedback: past
    the budget, each learner is rendered alone, within ``FEEDBACK_START_SECONDS``."""
    students = sorted(p.parent.name for p in (course / "autograded").glob(f"*/{assignment}"))
    students = [s for s in students if autograded_notebook(course, s, assignment) and not id_problem(s)]
    if not students:
        return []
    budget = FEEDBACK_START_SECONDS + FEEDBACK_SECONDS * len(students)
    try:
        nbgrader(course, "generate_feedback", assignment, "--force", timeout=budget)
        return []
    except SystemExit as exc:
        print(f"{assignment}: {str(exc).splitlines()[0]}; rendering each learner's notebook alone", file=sys.stderr)
    missed = []
    for student in students:
        try:
            nbgrader(
                course,
                "generate_feedback",
                assignment,
                "--force",
                f"--student={student}",
                quiet=True,
                timeout=FEEDBACK_START_SECONDS,
            )
        except SystemExit as exc:
            lines = str(exc).strip().splitlines()
            missed.append(
                f"{assignment}  {student}: {lines[0]}" + (f" ({lines[-1].strip()})" if len(lines) > 1 else "")
            )
    return missed


def feedback(course: Path) -> list[Path]:
    """nbgrader's notebook feedback, plus a per-check page per learner and exercise, plus an index per learner."""
    unrendered = []
    for assignment in assignments(course):
        unrendered += notebook_feedback(course, assignment)
    rows = graded_scores(course)
    refused = refused_submissions(course)
    scores: dict[tuple[str, str], dict[str, float]] = {}
    for row in rows:
        scores.setdefault((row["student"], row["assignment"]), {})[row["check"]] = row["points"]
    written = []
    index: dict[str, list[str]] = {}
    for path in sorted((course / "autograded").glob("*/ex[0-9][0-9]/*.ipynb")):
        student, assignment = path.parent.parent.name, path.parent.name
        records, notes = check_records(path)
        if student in refused.get(assignment, {}):  # handed in again, unreadable: these results are older
            notes = [refused_note(course, assignment, student, refused[assignment][student]), *notes]
        out_dir = course / "feedback" / student / assignment
        out_dir.mkdir(parents=True, exist_ok=True)
        nb_html = path.with_suffix(".html").name if (out_dir / path.with_suffix(".html").name).is_file() else None
        page = out_dir / "checks.html"
        page.write_text(
            feedback_page(student, assignment, records, scores.get((student, assignment), {}), notes, nb_html)
        )
        written.append(page)
        total = sum(scores.get((student, assignment), {}).values())
        possible = sum(float(r.get("max_points", 0)) for r in records.values())
        index.setdefault(student, []).append(
            f'<li><a href="{assignment}/checks.html">{assignment}</a>: {total:g} / {possible:g}</li>'
        )
    for assignment, students in sorted(refused.items()):
        for student, why in sorted(students.items()):
            if autograded_notebook(course, student, assignment):
                continue  # its page above carries the note
            out_dir = course / "feedback" / student / assignment
            out_dir.mkdir(parents=True, exist_ok=True)
            page = out_dir / "checks.html"
            page.write_text(
                feedback_page(student, assignment, {}, {}, [refused_note(course, assignment, student, why)], None)
            )
            written.append(page)
            index.setdefault(student, []).append(
                f'<li><a href="{assignment}/checks.html">{assignment}</a>: not graded</li>'
            )
    for student, items in index.items():
        page = course / "feedback" / student / "index.html"
        page.write_text(
            PAGE.format(
                title=f"Feedback for {html.escape(student)}",
                body=f"<h1>Feedback for {html.escape(student)}</h1><ul>{''.join(items)}</ul>",
            )
        )
        written.append(page)
    print(
        f"feedback for {len(index)} learner(s) under {course / 'feedback'}/<learner>/: index.html, and per exercise "
        "checks.html (the grader's pages) and nbgrader's page of the graded notebook"
    )
    if unrendered:
        print(
            "\n".join(["no page of the graded notebook (their checks.html pages are written):", *unrendered]),
            file=sys.stderr,
        )
    return written


def export(course: Path, which: list[str] | None = None) -> tuple[Path, Path]:
    """nbgrader's grade export (``grades.csv``) and one row per student and check (``grades_by_check.csv``); with
    ``which``, only those assignments (nbgrader lists every released one, 0 where nothing was handed in)."""
    grades = course / "grades.csv"
    nbgrader(course, "export", f"--CsvExportPlugin.to={grades}")
    with grades.open(newline="") as fh:  # its student ids are folder names a learner may have chosen
        table = list(csv.reader(fh))
    if which and table and "assignment" in table[0]:
        column = table[0].index("assignment")
        table = table[:1] + [row for row in table[1:] if len(row) > column and row[column] in which]
    with grades.open("w", newline="") as fh:
        csv.writer(fh).writerows([spreadsheet.cell(c) for c in row] for row in table)
    by_check = course / "grades_by_check.csv"
    rows = [r for r in graded_scores(course) if not which or r["assignment"] in which]
    for assignment, students in sorted(refused_submissions(course).items()):
        if which and assignment not in which:
            continue
        for student, why in sorted(students.items()):  # a row that says why, whatever the gradebook holds
            rows.append(
                {
                    "student": student,
                    "assignment": assignment,
                    "check": "submission",
                    "passed": False,
                    "message": why,
                    "notes": refused_note(course, assignment, student, why),
                }
            )
    fields = ["student", "assignment", *spreadsheet.CHECK_COLUMNS, "notes"]
    with by_check.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(spreadsheet.row(r) for r in rows)
    print(f"wrote {grades} and {by_check} ({len(rows)} check rows)")
    return grades, by_check


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--course", help="the nbgrader course folder (default: course/ or $COURSE)")
    sub = parser.add_subparsers(dest="command", required=True)
    rel = sub.add_parser("release", help="nbgrader release folder + learner kit zip")
    rel.add_argument(
        "--with-cache",
        nargs="*",
        default=[],
        type=Path,
        help="compile caches from `make warm-cache` to ship in the kit's cache/",
    )
    col = sub.add_parser("collect", help="copy DIR/<student>/**/NN_*.ipynb into submitted/")
    col.add_argument("source", type=Path)
    auto = sub.add_parser("autograde", help="nbgrader autograde with the hidden checks")
    auto.add_argument("--assignment", nargs="*", help="exNN ids (default: all released)")
    auto.add_argument("--jobs", type=int, default=1, help="students graded at once (default 1)")
    auto.add_argument("--force", action="store_true", help="regrade submissions graded before")
    auto.add_argument(
        "--unsandboxed",
        action="store_true",
        help="grade without the sandbox on a machine that has "
        "none (learner code then runs with your rights; every feedback page says so)",
    )
    sub.add_parser("feedback", help="per-student HTML feedback")
    exp = sub.add_parser("export", help="grades.csv and grades_by_check.csv")
    exp.add_argument("--assignment", nargs="*", help="exNN ids (default: every released one)")
    args = parser.parse_args(argv)
    course = course_dir(args.course)
    if args.command == "release":
        release(course, args.with_cache)
    elif args.command == "collect":
        ensure_course(course)
        collect(course, args.source)
    elif args.command == "autograde":
        autograde(course, args.assignment, args.jobs, args.force, args.unsandboxed)
    elif args.command == "feedback":
        feedback(course)
    elif args.command == "export":
        export(course, args.assignment)
    return 0


if __name__ == "__main__":
    sys.exit(main())
