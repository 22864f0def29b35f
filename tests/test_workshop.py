"""Workshop mode's progress table (``make check``): a score is marked "(untimed)" only where timed checks this copy
of the grader holds were left out, and each row says when it was checked, date included (instructor walkthrough,
session 31: in the learner kit, which holds no timed check, ``FULL=1`` changed only that label)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from grader import registry, workshop
from grader.results import CheckResult
from grader.runner import NotebookGrade

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("kinds", "full", "untimed"),
    [
        (("correctness",), False, False),
        (("correctness",), True, False),
        (("speed",), False, True),
        (("speed",), True, False),
    ],
)
def test_untimed_marks_a_score_that_left_timed_checks_out(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    kinds: tuple[str, ...],
    full: bool,
    untimed: bool,
) -> None:
    checks = [SimpleNamespace(id="ex00.a", kind="correctness", points=1, exercise="ex00", public=True)]
    checks += [
        SimpleNamespace(id=f"ex00.k{i}", kind=k, points=1, exercise="ex00", public=True) for i, k in enumerate(kinds)
    ]
    monkeypatch.setattr(workshop, "checks_for", lambda ex: checks if ex == "ex00" else [])
    monkeypatch.setattr(registry, "get", lambda cid: next(c for c in checks if c.id == cid))

    def fake_grade(notebook, ex, profile, seed, check_ids, **_: object) -> NotebookGrade:
        return NotebookGrade(
            str(notebook), ex, [CheckResult(c, ex, "correctness", 1, 1, True, None, None, "ok") for c in check_ids]
        )

    monkeypatch.setattr(workshop, "grade_notebook", fake_grade)
    monkeypatch.setattr(workshop, "STATE", tmp_path / "reports" / "workshop.json")
    folder = tmp_path / "exercises"
    folder.mkdir()
    shutil.copy(ROOT / "exercises" / "00_orientation.ipynb", folder)
    workshop.main(["00", "--folder", str(folder), "--no-progress"] + (["--full"] if full else []))
    entry = json.loads((tmp_path / "reports" / "workshop.json").read_text())["ex00"]
    assert entry["full"] is not untimed, entry
    said = "FULL=1 (--full) adds nothing for ex00" in capsys.readouterr().out
    assert said is (full and "speed" not in kinds), "FULL=1 where it adds nothing says so (the learner kit)"
    assert len(entry["when"].split()) == 2 and entry["when"].count("-") == 2, entry["when"]
