"""The one registry of checks: id, exercise, kind, points and visibility.

Checks are plain functions ``fn(learner, ctx)`` that run in the judge, never in the learner's process: they
ask the learner's code for observations (``learner.ask(probe, ...)``, see ``grader.learner``) and compare
them with their own reference, raising ``AssertionError`` with a message that teaches what to fix. They may
return a ``Measured`` (speed and count checks) so reports can show measured vs required. The command line,
pytest, workshop mode and ``make autograde`` all run checks from this registry, through the same runner.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Kind = Literal["correctness", "structure", "speed"]
KINDS: tuple[str, ...] = ("correctness", "structure", "speed")
INSTRUCTOR_INDEX = "instructor_checks.json"  # the learner kit's list of the checks it does not hold
EXERCISES_DIR = Path(__file__).resolve().parent / "exercises"


@dataclass(frozen=True)
class Measured:
    """What a check measured, against what it required (e.g. a speedup)."""

    measured: float | None = None
    required: float | None = None
    detail: str = ""


class Shortfall(AssertionError):
    """A failed check that still measured something worth reporting."""

    def __init__(self, message: str, measured: float | None = None, required: float | None = None) -> None:
        super().__init__(message)
        self.measured = measured
        self.required = required


@dataclass(frozen=True)
class Check:
    """One graded check."""

    id: str
    exercise: str
    kind: Kind
    points: int
    public: bool
    needs: tuple[str, ...]  # names from the submission the check uses (see grader.interface)
    fn: Callable[[Any, Any], Measured | None]
    fresh: bool = False  # runs in a new worker with empty compile caches (it times compiling)

    @property
    def title(self) -> str:
        """The first paragraph of the check's docstring, on one line: what it verifies (its first line alone
        stopped mid-sentence, as in "... of guarded properties (a tensor's": blind learner, session 38)."""
        return summary(self.fn.__doc__) or self.id


CHECKS: dict[str, Check] = {}


def check(id: str, *, kind: Kind, points: int, needs: tuple[str, ...] = (), public: bool = False, fresh: bool = False):
    """Register a check function under ``id`` (``exNN.subject.aspect``)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}")

    def register(fn: Callable[[Any, Any], Measured | None]) -> Callable[[Any, Any], Measured | None]:
        if id in CHECKS:
            raise ValueError(f"check {id!r} registered twice")
        CHECKS[id] = Check(id, id.split(".")[0], kind, points, public, needs, fn, fresh)
        return fn

    return register


@functools.cache
def notebook_order(exercise: str) -> tuple[str, ...]:
    """The exercise's check ids in the order its notebook's autograde cells ask for them (public and hidden
    interleaved, as the tasks come): from ``solutions/`` where this copy has it, else ``exercises/``."""
    import nbformat

    from grader.interface import NOTEBOOKS

    root = Path(__file__).resolve().parents[1]
    for folder in ("solutions", "exercises"):
        path = root / folder / NOTEBOOKS[exercise]
        if path.is_file():
            cells = nbformat.read(path, as_version=4).cells
            return tuple(
                c.metadata["nbgrader"]["grade_id"].replace("-", ".")
                for c in cells
                if c.metadata.get("nbgrader", {}).get("grade")
            )
    return ()


def load_all() -> dict[str, Check]:
    """Import every exercise's public and hidden checks (where this copy of the grader has them)."""
    from grader.exercises import exercise_ids, part

    for exercise in exercise_ids():
        for name in ("public", "hidden"):
            part(exercise, name)
    return CHECKS


def checks_for(exercise: str) -> list[Check]:
    """The checks of one exercise in report order: as its notebook asks for them (registration order for any
    check without an autograde cell, after the others)."""
    order = {cid: i for i, cid in enumerate(notebook_order(exercise))}
    ours = [c for c in load_all().values() if c.exercise == exercise]
    return sorted(ours, key=lambda c: order.get(c.id, len(order)))


def get(check_id: str) -> Check:
    """One check by id, with a helpful error for a typo."""
    checks = load_all()
    if check_id not in checks:
        raise KeyError(f"no check {check_id!r}; known: {', '.join(sorted(checks))}")
    return checks[check_id]


def exercises() -> list[str]:
    """Exercise ids that have checks, sorted."""
    return sorted({c.exercise for c in load_all().values()})


def instructor_only(exercise: str) -> list[dict[str, Any]]:
    """In the learner kit, the exercise's checks that only the instructor's grading runs: ``id``, ``kind``,
    ``points`` and ``what`` (the check's one-line description), from ``grader/exercises/<exercise>/``
    ``instructor_checks.json``, which ``make release`` writes. Empty where this copy holds the checks themselves."""
    path = EXERCISES_DIR / exercise / INSTRUCTOR_INDEX
    if not path.is_file():
        return []
    held = {c.id for c in load_all().values()}
    return [c for c in json.loads(path.read_text())["checks"] if c["id"] not in held]


def summary(doc: str | None) -> str:
    """A check's description for a table: its docstring's first paragraph on one line (docstrings wrap)."""
    return " ".join((doc or "").strip().split("\n\n")[0].split())


def instructor_index(exercise: str) -> dict[str, Any]:
    """What ``make release`` writes as ``instructor_checks.json`` for ``exercise``: its hidden checks, described,
    and for a speed check the gain it requires by default on each device class (``required``; an instructor's
    calibration for their machine replaces it when they grade)."""
    from grader.context import load_thresholds

    thresholds = load_thresholds()
    checks = []
    for c in checks_for(exercise):
        if c.public:
            continue
        entry: dict[str, Any] = {"id": c.id, "kind": c.kind, "points": c.points, "what": summary(c.fn.__doc__)}
        if c.kind == "speed":
            entry["required"] = {
                device: float(thresholds[device][c.id]["required"])
                for device in ("cpu", "cuda")
                if c.id in thresholds.get(device, {})
            }
        checks.append(entry)
    return {
        "generated": "by `make release` (tools/classroom/release.py) from the grader's hidden checks; do not edit",
        "checks": checks,
    }
