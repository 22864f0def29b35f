"""Lessons are discovered from their manifests, and a new lesson is one copied template folder."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import nbformat
import pytest

import coursekit.lessons
from coursekit import get_profile
from coursekit.lessons import Lesson, lessons
from grader import probing, registry
from grader.context import Context
from grader.exercises import exercise_ids
from grader.local_learner import LocalLearner
from grader.results import run_check

ROOT = Path(__file__).resolve().parents[1]


def test_every_lesson_has_its_notebooks_and_exercise_folder() -> None:
    found = lessons()
    assert [lesson.number for lesson in found] == list(range(len(found))), "lessons are numbered 0, 1, 2, ..."
    assert [lesson.id for lesson in found] == exercise_ids()
    assert sorted(p.name for p in (ROOT / "notebooks").glob("*.ipynb")) == [lesson.notebook for lesson in found]
    assert sorted(p.name for p in (ROOT / "solutions").glob("*.ipynb")) == [lesson.exercise for lesson in found]
    for lesson in found:
        assert lesson.notebook.startswith(f"{lesson.number:02d}_") and lesson.exercise.startswith(
            f"{lesson.number:02d}_"
        )
        assert (lesson.module("bench") is not None) if lesson.bench else True
        lesson.module("givens")


def test_a_lesson_hands_its_notebooks_cells_to_tests_by_id() -> None:
    """``Lesson.cells``: a lesson's tests run its notebook's own cells (the notebooks execute in `make test-compat`
    only); an id the notebook lacks is named, not skipped."""
    for lesson in lessons():
        code = [
            c for c in nbformat.read(ROOT / "notebooks" / lesson.notebook, as_version=4).cells if c.cell_type == "code"
        ]
        assert lesson.cells(code[0].id, code[-1].id) == [code[0].source, code[-1].source]
    with pytest.raises(KeyError, match="has no cell"):
        lessons()[0].cells("no-such-cell")


def test_a_lessons_sizes_name_the_same_things_on_every_profile() -> None:
    from coursekit.profile import PROFILES

    for lesson in lessons():
        if not lesson.sizes:
            continue
        assert set(lesson.sizes) == set(PROFILES), f"{lesson.topic}/lesson.toml: one [sizes.<name>] per profile"
        names = {profile: set(lesson.sizes_for(profile)) for profile in PROFILES}
        assert len({frozenset(n) for n in names.values()}) == 1, f"{lesson.topic}/lesson.toml sizes differ: {names}"
    with pytest.raises(KeyError, match=r"has no \[sizes.huge\]"):
        next(lesson for lesson in lessons() if lesson.sizes).sizes_for("huge")


def test_shared_code_never_names_a_lesson() -> None:
    topics = [lesson.topic for lesson in lessons()]
    for path in (ROOT / "coursekit").glob("*.py"):
        text = path.read_text()
        for topic in topics:
            assert f"coursekit.lessons.{topic}" not in text, f"{path.name} imports lesson {topic}: shared code must not"


def test_a_lesson_imports_no_other_lesson() -> None:
    """A lesson's notebook, exercise and code use shared code and its own folder: never another lesson's."""
    found = lessons()
    for lesson in found:
        others = [f"coursekit.lessons.{o.topic}" for o in found if o.topic != lesson.topic]
        own = [ROOT / "notebooks" / lesson.notebook, ROOT / "solutions" / lesson.exercise]
        own += (ROOT / "coursekit" / "lessons" / lesson.topic).glob("*.py")
        for path in own:
            text = path.read_text()
            named = [o for o in others if o in text]
            assert not named, f"{path.relative_to(ROOT)} uses {named}: move what they share into coursekit/"


def _load(path: Path, name: str, package: bool = False) -> ModuleType:
    """Import ``path`` as module ``name`` (a package, whose modules import each other, when ``package``)."""
    search = [str(path.parent)] if package else None
    spec = importlib.util.spec_from_file_location(name, path, submodule_search_locations=search)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def new_lesson(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The two template folders copied as a throwaway lesson 99, made visible to discovery."""
    lessons_dir = tmp_path / "lessons"
    shutil.copytree(ROOT / "coursekit" / "lessons" / "_template", lessons_dir / "new_topic")
    shutil.copytree(ROOT / "grader" / "exercises" / "_template", tmp_path / "ex99")
    found = lessons(lessons_dir)
    real = lessons()
    monkeypatch.setattr(coursekit.lessons, "lessons", lambda folder=None: real + found)
    before = (dict(registry.CHECKS), dict(probing.PROBES))
    yield tmp_path, found
    registry.CHECKS.clear()
    registry.CHECKS.update(before[0])
    probing.PROBES.clear()
    probing.PROBES.update(before[1])
    for name in [n for n in sys.modules if n.startswith("throwaway_")]:
        del sys.modules[name]


def test_a_new_lesson_is_one_copied_folder(new_lesson) -> None:
    tmp_path, found = new_lesson
    assert found == (
        Lesson("new_topic", 99, "A new lesson", "99_new_lesson.ipynb", "99_new_lesson.ipynb", False, 0.0, 0.0),
    )
    package = _load(tmp_path / "lessons" / "new_topic" / "__init__.py", "throwaway_new_topic", package=True)
    own_tests = importlib.import_module(f"{package.__name__}.test_lesson")
    tests = [value for name, value in vars(own_tests).items() if name.startswith("test_")]
    assert tests, "the template's test_lesson.py has tests"
    for test in tests:  # the lesson's own tests run in the copy, importing its material and givens
        test()

    contract = _load(tmp_path / "ex99" / "contract.py", "throwaway_contract")
    assert contract.NOTEBOOK == "99_new_lesson.ipynb" and [n.name for n in contract.NAMES] == ["double"]
    _load(tmp_path / "ex99" / "probes.py", "throwaway_probes")
    _load(tmp_path / "ex99" / "public.py", "throwaway_public")
    check = registry.CHECKS["ex99.double.values"]
    assert check.exercise == "ex99" and check.public and set(check.needs) <= {n.name for n in contract.NAMES}

    ctx = Context.create(get_profile("smoke", "cpu"), 5)
    right = LocalLearner({"double": lambda x: x * 2}, "ex99", ctx.profile)
    wrong = LocalLearner({"double": lambda x: x * 3}, "ex99", ctx.profile)
    assert run_check(check, right, ctx).passed
    result = run_check(check, wrong, ctx)
    assert not result.passed and "double(x)" in result.message
