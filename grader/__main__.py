"""``python -m grader PATH [--report FILE.json]``: grade a notebook or a folder of them.

Prints a score table and writes JSON and markdown reports.  Exits 0 whenever
grading ran, whatever the score; 2 when the arguments are wrong.

Subcommands (a folder literally named like one is graded as ``./NAME``):

* ``python -m grader batch DIR``: grade a class, one submission per process (``grader.batch``);
* ``python -m grader calibrate``: thresholds for this machine from the reference solutions (``grader.calibrate``);
* ``python -m grader check EX``: workshop mode, one exercise quickly plus a progress table (``grader.workshop``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from coursekit.profile import get_profile
from grader.context import Context
from grader.interface import NOTEBOOKS, exercise_for, unknown_notebook
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
        raise SystemExit(f"grader: {unknown_notebook(path)}")
    return [(exercise, path)]


SUBCOMMANDS = {"batch": "grader.batch", "calibrate": "grader.calibrate", "check": "grader.workshop"}


def threshold_sources(report: dict, ctx: Context) -> dict[str, str]:
    """For each speed check in ``report``: the calibration file or the defaults it was graded against."""
    return {c["id"]: ctx.threshold_source(c["id"]) for c in report["checks"] if c["kind"] == "speed"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in SUBCOMMANDS:
        try:
            module = importlib.import_module(SUBCOMMANDS[argv[0]])
        except ImportError as exc:
            raise SystemExit(f"grader: `{argv[0]}` is not part of this copy of the grader ({exc})") from None
        return module.main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m grader", description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="a submission notebook, or a folder such as exercises/")
    parser.add_argument("--report", type=Path, help="JSON report path (default: reports/<name>.json)")
    parser.add_argument("--only", help="comma-separated check ids to run")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument(
        "--unsandboxed", action="store_true", help="run learner code without the sandbox (reports say so)"
    )
    args = parser.parse_args(argv)
    if not args.path.exists():
        parser.error(f"{args.path} does not exist")

    profile = get_profile()
    ctx = Context.create(profile)
    secret = ctx.secret
    only = set(args.only.split(",")) if args.only else None
    grades = []
    for exercise, notebook in find_notebooks(args.path):
        ids = [c.id for c in checks_for(exercise) if only is None or c.id in only]
        if not ids:
            continue
        if not notebook.is_file():
            grades.append(
                NotebookGrade(
                    str(notebook),
                    exercise,
                    [
                        CheckResult.failed(c, f"notebook not found: {notebook}")
                        for c in checks_for(exercise)
                        if c.id in ids
                    ],
                )
            )
            continue
        grades.append(
            grade_notebook(
                notebook,
                exercise,
                profile,
                secret,
                check_ids=ids,
                ctx=ctx,
                progress=not args.no_progress,
                sandbox_policy="off" if args.unsandboxed else "prefer",
            )
        )
    report = build_report(grades, profile, ctx.describe_thresholds())
    report["threshold_sources"] = threshold_sources(report, ctx)
    print_table(report)
    if any(c["kind"] == "speed" for c in report["checks"]):
        print(f"thresholds: {report['thresholds']}")
    target = args.report or Path("reports") / f"{args.path.stem or 'submission'}.json"
    for written in write_reports(report, target):
        print(f"wrote {written}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
