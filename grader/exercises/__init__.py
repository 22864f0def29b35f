"""One folder per exercise, discovered (``exNN/``), each with:

* ``contract.py``: the notebook's file name and the names the grader reads from it (ships in the kit);
* ``probes.py``: worker-side code that calls those names on the judge's inputs and reports what it sees
  (ships in the kit: in-notebook checks run it in the learner's kernel);
* ``public.py``: the public checks, which compare against stored expected values (``fixtures.safetensors``)
  or against the exercise's given code, never against a reference solution (ships in the kit);
* ``hidden.py``: the hidden checks, and ``reference.py``: the grader's reference implementations
  (instructor only: never in the kit, never readable by a grading worker).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Name:
    """One name a submission must define, and what it must be."""

    name: str
    contract: str


def exercise_ids() -> list[str]:
    """Every ``exNN`` folder with a contract, sorted."""
    return sorted(p.name for p in HERE.glob("ex[0-9][0-9]") if (p / "contract.py").is_file())


def part(exercise: str, name: str) -> ModuleType | None:
    """``grader.exercises.<exercise>.<name>``, or None where this copy of the grader lacks it (the kit)."""
    if not (HERE / exercise / f"{name}.py").is_file():
        return None
    return importlib.import_module(f"grader.exercises.{exercise}.{name}")
