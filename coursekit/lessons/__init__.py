"""The course's lessons, discovered: one folder per lesson, each with a ``lesson.toml`` manifest.

A lesson's folder (``coursekit/lessons/<topic>/``) holds everything that is that lesson's own: ``material.py``
(what the lesson notebook runs), ``bench.py`` (its recorded figures: ``run(profile, args) -> dict``,
``print_table``, ``markdown_table``), ``charts.py`` where it draws its own, and ``givens.py`` (the code its
exercise hands the learner). Its manifest names the lesson and its notebooks, and holds its problem sizes per
profile (``[sizes.full]``, ``[sizes.smoke]``): :meth:`Lesson.sizes_for`. Nothing outside the folder lists
lessons: the bench CLI, the tests and the tools ask :func:`lessons`.
"""

from __future__ import annotations

import importlib
import json
import tomllib
from dataclasses import MISSING, dataclass, field, fields
from functools import cache
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


@dataclass(frozen=True)
class Lesson:
    """One lesson's manifest (``lesson.toml``) and where its code lives."""

    topic: str  # the folder's name: coursekit.lessons.<topic>
    number: int
    title: str
    notebook: str  # in notebooks/
    exercise: str  # the exercise notebook's name, in solutions/ and exercises/
    bench: bool  # has a bench.py that `make bench` runs
    test_minutes: float  # what its slow tests cost on 2 CPU cores (smoke profile), for scheduling
    full_memory_gib: float  # GPU memory its full profile needs (coursekit.memory; 0: no sizes.py)
    sizes: dict = field(default_factory=dict, compare=False)  # {profile name: {size: value}}, from [sizes.<name>]

    @property
    def id(self) -> str:
        """``ex01``: the exercise's id in the grader (``grader/exercises/<id>/``)."""
        return f"ex{self.number:02d}"

    @property
    def package(self) -> str:
        return f"{__name__}.{self.topic}"

    def sizes_for(self, profile: str) -> dict:
        """This lesson's own problem sizes on ``profile`` (``full``, ``smoke``): its manifest's ``[sizes.<name>]``."""
        if profile not in self.sizes:
            raise KeyError(f"{self.topic}/lesson.toml has no [sizes.{profile}]; it has {sorted(self.sizes)}")
        return self.sizes[profile]

    def cells(self, *ids: str) -> list[str]:
        """The sources of this lesson notebook's code cells ``ids`` (nbformat cell ids), for tests that run one."""
        nb = json.loads((ROOT / "notebooks" / self.notebook).read_text())
        by_id = {c.get("id"): "".join(c["source"]) for c in nb["cells"]}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise KeyError(f"notebooks/{self.notebook} has no cell {missing}")
        return [by_id[i] for i in ids]

    def module(self, name: str) -> ModuleType:
        """Import this lesson's ``name`` module (``material``, ``bench``, ``givens``, ...)."""
        return importlib.import_module(f"{self.package}.{name}")


def _load(folder: Path) -> Lesson:
    data = tomllib.loads((folder / "lesson.toml").read_text())
    known = {f.name for f in fields(Lesson)} - {"topic"}
    required = {f.name for f in fields(Lesson) if f.default is MISSING and f.default_factory is MISSING} - {"topic"}
    missing, extra = required - set(data), set(data) - known
    if missing or extra:
        raise ValueError(f"{folder / 'lesson.toml'}: missing {sorted(missing)}, unknown {sorted(extra)}")
    return Lesson(topic=folder.name, **data)


@cache
def lessons(folder: Path = HERE) -> tuple[Lesson, ...]:
    """Every lesson, in course order: the sub-folders of ``folder`` that hold a ``lesson.toml``."""
    manifests = [p for p in folder.glob("*/lesson.toml") if not p.parent.name.startswith("_")]  # _template
    found = sorted((_load(p.parent) for p in manifests), key=lambda lesson: lesson.number)
    numbers = [lesson.number for lesson in found]
    if len(set(numbers)) != len(numbers):
        raise ValueError(f"two lessons share a number: {numbers}")
    return tuple(found)


def lesson(key: int | str) -> Lesson:
    """A lesson by number (``1``, ``"01"``), exercise id (``"ex01"``) or topic (``"cross_entropy"``)."""
    for candidate in lessons():
        if str(key) in (candidate.topic, candidate.id, str(candidate.number), f"{candidate.number:02d}"):
            return candidate
    raise KeyError(f"no lesson {key!r}; the lessons are {[c.topic for c in lessons()]}")
