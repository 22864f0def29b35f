"""Workshop mode: ``python -m grader check EX`` (``make check EX=01``).

Checks one exercise quickly (every check but the timed ones, unless ``--full``),
prints its table, then a progress table of all exercises: how many tasks are
written (solution cells without ``raise NotImplementedError()``) and the last
check's points.  Results are kept in ``reports/workshop.json``, so the table
shows every exercise checked so far; an exercise checked from a notebook path
(``make check EX=path/to/01_x.ipynb``) is shown from that notebook afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from coursekit.profile import get_profile
from grader.context import Context
from grader.interface import NOTEBOOKS, exercise_for, unknown_notebook
from grader.loader import NotebookError, nbgrader_metadata, notebook_json, submission_bytes
from grader.registry import checks_for
from grader.report import build_report, print_table
from grader.runner import grade_notebook

STATE = Path("reports") / "workshop.json"


def resolve(exercise: str, folder: Path) -> tuple[str, Path]:
    """``01``, ``1``, ``ex01`` or a notebook path -> (exercise id, notebook)."""
    path = Path(exercise)
    if path.suffix == ".ipynb":
        ex = exercise_for(path)
        if ex is None:
            raise SystemExit(f"grader check: {unknown_notebook(path)}")
        return ex, path
    digits = exercise.lower().removeprefix("ex")
    ex = f"ex{int(digits):02d}" if digits.isdigit() else exercise
    if ex not in NOTEBOOKS:
        raise SystemExit(
            f"grader check: no exercise {exercise!r}; choose one of "
            f"{', '.join(k.removeprefix('ex') for k in NOTEBOOKS)}"
        )
    return ex, folder / NOTEBOOKS[ex]


def tasks(notebook: Path) -> tuple[int, int]:
    """(written, total) solution cells: written ones no longer raise ``NotImplementedError``."""
    try:
        nb = notebook_json(submission_bytes(notebook), notebook.name)
    except NotebookError:  # the grading that follows says what is wrong with it
        return 0, 0
    cells = [c for c in nb["cells"] if isinstance(c, dict) and nbgrader_metadata(c).get("solution")]
    source = ["".join(c.get("source", "")) if isinstance(c.get("source"), list) else c.get("source", "") for c in cells]
    return sum("raise NotImplementedError()" not in s for s in source), len(cells)


def _load_state() -> dict:
    try:
        return json.loads(STATE.read_text())
    except (OSError, ValueError):
        return {}


def _save_state(state: dict) -> None:
    STATE.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=STATE.parent, prefix=".workshop.")
    with os.fdopen(fd, "w") as fh:
        json.dump(state, fh, indent=2)
    os.replace(tmp, STATE)


def progress_table(folder: Path, state: dict) -> Table:
    """One row per exercise: tasks written, last check's points and checks passed, and when."""
    table = Table(title="Your progress")
    for col in ("exercise", "notebook", "tasks written", "points (last check)", "checks passed", "checked"):
        table.add_column(col)
    for ex, name in NOTEBOOKS.items():
        entry = state.get(ex)
        checked = Path(entry["notebook"]) if entry and entry.get("notebook") else None
        notebook = checked if checked is not None and checked.is_file() else folder / name
        done, total = tasks(notebook) if notebook.is_file() else (0, 0)
        if not checks_for(ex):
            last, passed, when = "no checks in this kit", "-", "-"
        elif entry:
            last = f"{entry['score']:g} / {entry['max_score']:g}" + ("" if entry.get("full") else " (untimed)")
            passed = f"{entry['passed']} / {entry['checks']}"
            when = entry["when"]
        else:
            last, passed, when = "not checked yet", "-", "-"
        written = f"{done} / {total}" if notebook.is_file() else "notebook not found"
        style = "green" if entry and entry["passed"] == entry["checks"] else None
        shown = name if notebook == folder / name else os.path.relpath(notebook)  # checked by path: that notebook
        table.add_row(ex.removeprefix("ex"), shown, written, last, passed, when, style=style)
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader check", description=__doc__.splitlines()[0])
    parser.add_argument("exercise", help="01, 1, ex01 or a notebook path")
    parser.add_argument("--folder", type=Path, default=Path("exercises"), help="where the exercises are")
    parser.add_argument("--full", action="store_true", help="also run the timed (speed) checks")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    ex, notebook = resolve(args.exercise, args.folder)
    ids = [c.id for c in checks_for(ex) if args.full or c.kind != "speed"]
    console = Console() if Console().is_terminal else Console(width=160)
    state = _load_state()
    if args.full and not any(c.kind == "speed" for c in checks_for(ex)):
        console.print(
            f"FULL=1 (--full) adds nothing for {ex}: this copy of the grader holds none of its timed checks (the "
            "learner kit ships none: your instructor's grading times them)"
        )
    if not ids:
        console.print(f"{ex} has no checks in this copy of the grader")
    elif not notebook.is_file():
        console.print(f"[red]{notebook} not found[/]")
    else:
        profile = get_profile()
        ctx = Context.create(profile)
        grade = grade_notebook(notebook, ex, profile, ctx.secret, check_ids=ids, ctx=ctx, progress=not args.no_progress)
        report = build_report([grade], profile, ctx.describe_thresholds())
        print_table(report, console)
        skipped = [c.id for c in checks_for(ex) if c.id not in ids]
        if skipped:
            console.print(
                f"not run in workshop mode (timed): {', '.join(skipped)}; `make check EX=... FULL=1` "
                "or `make grade` runs them"
            )
        state[ex] = {
            "score": grade.score,
            "max_score": grade.max_score,
            "checks": len(grade.results),
            "passed": sum(r.passed for r in grade.results),
            "full": not skipped,  # every check this copy of the grader holds ran: the score is not partial
            "notebook": str(notebook.resolve()) if notebook != args.folder / NOTEBOOKS[ex] else None,
            "when": datetime.now(UTC).astimezone().strftime("%Y-%m-%d %H:%M"),
        }
        _save_state(state)
    console.print(progress_table(args.folder, state))
    return 0
