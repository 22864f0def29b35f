"""No lesson cell, pasted into an exercise's answer cells, passes one of that exercise's checks.

An exercise must need the lesson's skill on a case the lesson did not show. ``tests/pastes.py`` builds every
plausible paste (a lesson cell as it is, plus at most one line renaming what it defines or imports from the kit);
each is graded on the correctness and structure checks that read the pasted name, with the reference solution in
every other answer cell. A paste that needs adapting beyond a rename is out of reach of this test: the exercises'
own texts and reviews cover that.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from coursekit.lessons import lesson
from grader.interface import INTERFACE, NOTEBOOKS
from grader.registry import checks_for
from tests.pastes import Paste, paste_rounds, pastes, plausible, stub_shapes, words, write_round
from tests.submissions import ROOT


def passing_pastes(grade, exercise: str, folder: Path, lesson_path: str | None = None) -> list[str]:
    """``paste: check`` for every paste that passes a check that reads its name."""
    found = []
    for i, pasted in enumerate(paste_rounds(list(pastes(exercise, lesson_path)))):
        checks = [c for c in checks_for(exercise) if c.kind != "speed" and set(c.needs) & set(pasted)]
        if not checks:
            continue
        results = grade(
            write_round(exercise, pasted, folder / f"{i:02d}_{NOTEBOOKS[exercise]}"), [c.id for c in checks]
        )
        for check in checks:
            if results[check.id].passed:
                blamed = [str(pasted[n]) for n in check.needs if n in pasted]
                found.append(f"{' + '.join(blamed)}: passes {check.id}")
    return found


@pytest.mark.slow
@pytest.mark.parametrize("exercise", list(INTERFACE))
def test_no_lesson_cell_pasted_into_an_answer_cell_passes_a_check(grade, tmp_path, exercise: str) -> None:
    found = passing_pastes(grade, exercise, tmp_path)
    assert not found, (
        f"{exercise} can be solved by pasting a lesson cell: {found}. Change the exercise so that it needs the "
        "lesson's skill on a case the lesson did not show."
    )


@pytest.mark.slow
def test_the_paste_test_flags_a_lesson_that_shows_the_answer(grade, tmp_path) -> None:
    """A lesson whose cell holds exercise 0's reference ``count_compiles`` under another name is caught."""
    solution = nbformat.read(ROOT / "solutions" / NOTEBOOKS["ex00"], as_version=4)
    answer = solution.cells[stub_shapes("ex00")["count_compiles"][0]].source
    lesson = nbformat.v4.new_notebook()
    lesson.cells = [
        nbformat.v4.new_code_cell("import torch\nfrom torch._dynamo.testing import CompileCounter"),
        nbformat.v4.new_code_cell(answer.replace("def count_compiles(", "def count_graphs(")),
    ]
    path = tmp_path / "lesson.ipynb"
    nbformat.write(lesson, path)
    found = passing_pastes(grade, "ex00", tmp_path, str(path))
    assert found and all("count_compiles calls count_graphs" in line for line in found), found
    assert any("ex00.recompiles.count" in line for line in found), found


def test_pastes_include_the_lesson_tools_a_learner_would_rename() -> None:
    """The filter keeps what looks like the same tool and drops the rest: lesson 0's ``compiles_so_far`` is a paste
    for ``count_compiles``, its ``tiny(x, w)`` is not."""
    found = {(p.name, p.binds) for p in pastes("ex00")}
    assert ("count_compiles", "compiles_so_far") in found, found
    assert not any(binds == "tiny" for _, binds in found), found
    assert words("FixedGatedMLP") == {"fixed", "gated", "mlp"} and words("count_compiles") == {"count", "compiles"}
    stub = stub_shapes("ex00")["count_compiles"][1]
    other = next(p for p in pastes("ex00") if p.binds == "compiles_so_far")
    assert isinstance(other, Paste) and other.lesson == f"notebooks/{lesson('ex00').notebook}"
    assert plausible("count_compiles", stub, "count_graphs", stub)
