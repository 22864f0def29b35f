"""Build deliberately wrong submissions from the solution notebook, by editing its source text.

The edits live with each exercise (``grader/exercises/exNN/submissions.py``); the exercises are discovered."""

from __future__ import annotations

from pathlib import Path

import nbformat

from grader.exercises import exercise_ids, part

ROOT = Path(__file__).resolve().parent.parent


def _exercises() -> dict[str, tuple[Path, Path, dict]]:
    """``{exercise id: (solution notebook, exercise notebook, wrong submissions)}``, discovered."""
    found = {}
    for exercise in exercise_ids():
        notebook = part(exercise, "contract").NOTEBOOK
        wrong = part(exercise, "submissions")
        found[exercise] = (ROOT / "solutions" / notebook, ROOT / "exercises" / notebook, wrong.WRONG if wrong else {})
    return found


def _measured() -> dict[tuple[str, str], set[str]]:
    """``{(exercise, wrong submission): speed checks it fails by measurement}``, from each ``MEASURED``."""
    found = {}
    for exercise in exercise_ids():
        wrong = part(exercise, "submissions")
        found.update({(exercise, name): ids for name, ids in getattr(wrong, "MEASURED", {}).items()})
    return found


def first_to_fail(exercise: str) -> list[str]:
    """The wrong submissions of ``exercise`` that `make test` grades: in the order they are listed, each one that
    must fail a check no submission before it must fail. Every check a wrong submission is meant to fail is then
    failed by one graded on the pinned torch; the others (another way to fail the same checks) are graded in
    `make test-compat`, on the oldest supported torch, so CI still grades every one of them once."""
    covered: set[str] = set()
    kept = []
    for name, (_, expected) in EXERCISES[exercise][2].items():
        judged = set(expected) - MEASURED.get((exercise, name), set())
        if not judged or judged - covered:
            kept.append(name)
            covered |= judged
    return kept


def _split() -> dict[str, bool]:
    """``{exercise: SPLIT_GRADING}``: whether `make test` grades its first-listed wrong submissions only on the checks
    they must fail, leaving the checks they must pass to `make test-compat` (``tests/test_grader.py``)."""
    return {ex: bool(getattr(part(ex, "submissions"), "SPLIT_GRADING", False)) for ex in exercise_ids()}


EXERCISES = _exercises()
MEASURED = _measured()  # these speed checks run in the timing pass, alone
SPLIT = _split()
SOLUTION_01, EXERCISE_01 = EXERCISES["ex01"][:2]  # the exercise the grader's own tests use as their subject


def variant(solution: Path, out: Path, edits: dict[str, str], append: tuple[str, ...] = ()) -> Path:
    """Copy ``solution`` to ``out`` replacing each ``old`` text with ``new`` (every edit must apply once), then
    append a code cell for each of ``append``."""
    nb = nbformat.read(solution, as_version=4)
    for old, new in edits.items():
        hits = [c for c in nb.cells if c.cell_type == "code" and old in c.source]
        if len(hits) != 1:
            raise ValueError(f"edit {old!r} matches {len(hits)} code cells, expected exactly 1")
        hits[0].source = hits[0].source.replace(old, new)
    nb.cells += [nbformat.v4.new_code_cell(source) for source in append]
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)
    return out


# exercise -> (solution, unmodified exercise, wrong submissions)
