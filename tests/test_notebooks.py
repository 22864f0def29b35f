"""Notebooks are stored clean, exercises/ matches solutions/, and lessons and solutions run top to bottom."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from grader.notebook import SCOPE_ENV

ROOT = Path(__file__).resolve().parent.parent
ALL_NOTEBOOKS = sorted(p for d in ("notebooks", "solutions", "exercises") for p in (ROOT / d).glob("*.ipynb"))
# Every lesson and solution notebook is executed in `make test-compat` only (marker `compat`), so CI runs each one
# once, on the oldest torch the kit supports: executing them is 1,000 s of `make test`'s test time, and they are what
# can differ between torch versions. `make test` grades every solution through the judge (tests/test_grader.py), which
# runs its public and hidden checks but not its demo cells, runs each lesson's own tests (coursekit/lessons/*/), and
# `make test-browser` runs lesson 1 on the pinned torch; `make test-notebooks` executes them all on the pinned torch.
RUNNABLE = [
    pytest.param(p, marks=pytest.mark.compat)
    for p in (*sorted((ROOT / "notebooks").glob("*.ipynb")), *sorted((ROOT / "solutions").glob("*.ipynb")))
]


@pytest.mark.parametrize("path", ALL_NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_stored_clean_and_numbered(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert path.name[:3].rstrip("_").isdigit() and path.name[2] == "_", f"{path.name}: name it NN_topic.ipynb"
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert not cell.outputs, f"{path.name} cell {i} has stored outputs: clear them before committing"
            assert cell.execution_count is None, f"{path.name} cell {i} has an execution count"
    assert "widgets" not in nb.metadata


def test_every_notebook_dir_is_populated() -> None:
    for d in ("notebooks", "solutions", "exercises"):
        assert list((ROOT / d).glob("[0-9][0-9]_*.ipynb")), f"{d}/ has no notebooks"


@pytest.mark.slow  # nbgrader regenerates every exercise (about 45 s): `make test` runs it, `make test-fast` not
def test_exercises_are_generated_from_solutions() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tools.make_exercises", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    for path in (ROOT / "exercises").glob("*.ipynb"):
        text = path.read_text()
        assert "Generated file" in text and "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text


@pytest.mark.slow
@pytest.mark.parametrize("path", RUNNABLE, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_executes_top_to_bottom_on_the_smoke_profile(path: Path, tmp_path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    env_before = dict(os.environ)
    os.environ.update(COURSEKIT_PROFILE="smoke", COURSEKIT_DEVICE="cpu")
    if path.parent.name == "solutions":  # their hidden checks are graded through the judge in test_grader.py
        os.environ[SCOPE_ENV] = "public"
    try:
        NotebookClient(
            nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
        ).execute()
    finally:
        os.environ.clear()
        os.environ.update(env_before)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
    # nbgrader zeroes an autograde cell that writes to stderr: passing checks must keep stderr clean
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade"):
            stderr = [o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stderr"]
            assert not stderr, f"autograde cell {cell.metadata['nbgrader']['grade_id']} wrote to stderr: {stderr}"
