"""``python -m grader PATH [--report FILE.json]``: grade a notebook or a folder of them.

Prints a score table and writes JSON and markdown reports.  Exits 0 whenever
grading ran, whatever the score; 2 when the arguments are wrong.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from coursekit.profile import get_profile
from grader.context import THRESHOLDS_FILE, Context
from grader.interface import NOTEBOOKS, exercise_for
from grader.registry import checks_for, exercises
from grader.report import build_report, print_table, write_reports
from grader.results import CheckResult
from grader.runner import NotebookGrade, grade_notebook


def find_notebooks(path: Path) -> list[tuple[str, Path]]:
    """(exercise, notebook) pairs: one file, or every graded exercise expected in a folder."""
    if path.is_dir():
        return [(ex, path / NOTEBOOKS[ex]) for ex in exercises()]
    exercise = exercise_for(path)
    if exercise is None:
        raise SystemExit(f"grader: cannot tell which exercise {path.name} is; name it like "
                         f"{', '.join(NOTEBOOKS.values())}")
    return [(exercise, path)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m grader", description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="a submission notebook, or a folder such as exercises/")
    parser.add_argument("--report", type=Path, help="JSON report path (default: reports/<name>.json)")
    parser.add_argument("--only", help="comma-separated check ids to run")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    if not args.path.exists():
        parser.error(f"{args.path} does not exist")

    profile = get_profile()
    seed = Context.create(profile).secret_seed
    only = set(args.only.split(",")) if args.only else None
    grades = []
    for exercise, notebook in find_notebooks(args.path):
        ids = [c.id for c in checks_for(exercise) if only is None or c.id in only]
        if not ids:
            continue
        if not notebook.is_file():
            grades.append(NotebookGrade(str(notebook), exercise, [
                CheckResult.failed(c, f"notebook not found: {notebook}") for c in checks_for(exercise)
                if c.id in ids]))
            continue
        grades.append(grade_notebook(notebook, exercise, profile, seed, check_ids=ids,
                                     progress=not args.no_progress))
    report = build_report(grades, profile, f"{THRESHOLDS_FILE.name} [{profile.device_class}]")
    print_table(report)
    target = args.report or Path("reports") / f"{args.path.stem or 'submission'}.json"
    for written in write_reports(report, target):
        print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
