"""The nbgrader front end: run a registered check on a notebook's own globals.

Each autograde cell in ``solutions/`` calls ``run_check("<id>", globals())``;
nbgrader gives the cell's points when it runs without error.  The check is
the same function ``python -m grader`` and pytest run.
"""

from __future__ import annotations

from typing import Any

from grader.context import Context
from grader.interface import Submission
from grader.quiet import stderr_to_stdout
from grader.registry import get
from grader.results import run_check as _run

_CONTEXT: Context | None = None


def run_check(check_id: str, namespace: dict[str, Any]) -> None:
    """Run ``check_id`` against ``namespace``; print the outcome, raise ``AssertionError`` if it fails."""
    global _CONTEXT
    check = get(check_id)
    _CONTEXT = _CONTEXT or Context.create()
    with stderr_to_stdout():
        result = _run(check, Submission(check.exercise, namespace), _CONTEXT)
    mark = "PASS" if result.passed else "FAIL"
    print(f"[{mark}] {check.id} ({result.points:g}/{result.max_points}): {check.title}")
    if not result.passed:
        raise AssertionError(result.message)
    if result.message != "ok":
        print(f"       {result.message}")
