"""What a class hands in is files, and not every file is a notebook (red team, session 30): a symbolic link to a
solution scored full marks in ``grader batch``, and ``collect`` copied what a link pointed to (hidden checks, a
classmate's work) into nbgrader's ``submitted/``; a dangling link or a folder named like a notebook stopped the
whole batch, and a pipe hung it. Each now costs its own submission a zero that says why, and nobody else anything.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import nbformat
import pytest

from grader import batch

NOTEBOOK = "01_cross_entropy_ladder.ipynb"


def _class(root: Path, secret: Path) -> Path:
    """A class folder: ``honest`` handed in a notebook, everyone else something that is not one."""
    folder = root / "class"
    for student in ("honest", "linker", "dangler", "folderer", "piper"):
        (folder / student).mkdir(parents=True)
    (folder / "honest" / NOTEBOOK).write_text(json.dumps(nbformat.v4.new_notebook()))
    (folder / "linker" / NOTEBOOK).symlink_to(secret)
    (folder / "dangler" / NOTEBOOK).symlink_to(root / "gone")
    (folder / "folderer" / NOTEBOOK).mkdir()
    os.mkfifo(folder / "piper" / NOTEBOOK)
    (folder / "summary.csv").mkdir()  # a "student" whose reports would take the batch's own CSV's place
    (folder / "linked-student").symlink_to(secret.parent, target_is_directory=True)
    return folder


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "solutions" / NOTEBOOK
    path.parent.mkdir()
    path.write_text(json.dumps(nbformat.v4.new_notebook(metadata={"secret": "the reference solution"})))
    return path


def test_a_batch_grades_what_is_a_notebook_and_scores_the_rest_zero_with_the_reason(
    tmp_path: Path, secret: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, out = _class(tmp_path, secret), tmp_path / "out"
    jobs, warnings = batch.discover(folder, out)
    why = {job.student: job.unreadable for job in jobs}
    assert why == {
        "honest": "",
        "linker": f"{NOTEBOOK} is a symbolic link, not a notebook: submit the notebook file itself",
        "dangler": f"{NOTEBOOK} is a symbolic link, not a notebook: submit the notebook file itself",
        "folderer": f"{NOTEBOOK} is a folder, not a notebook: submit the notebook file itself",
        "piper": f"{NOTEBOOK} is not a regular file (a pipe, socket or device): submit the notebook",
    }
    assert any("linked-student: a student folder a symbolic link; skipped" in w for w in warnings)
    assert any("summary.csv: a student folder named like the batch's own summary.csv; skipped" in w for w in warnings)

    # only the broken submissions, so nothing is graded: each gets its zero, and the batch ends with its CSVs
    (folder / "honest" / NOTEBOOK).unlink()
    assert batch.main([str(folder), "--out", str(out), "--only", "ex01.builtin.values", "--unsandboxed"]) == 0
    for student, reason in why.items():
        if student == "honest":
            continue
        report = json.loads((out / student / "ex01.json").read_text())
        assert report["score"] == 0 and report["checks"][0]["message"] == reason
    assert (out / "summary.csv").is_file() and (out / "scores.csv").is_file()
    assert "the reference solution" not in capsys.readouterr().out + (out / "summary.csv").read_text()


def test_collect_copies_notebooks_only_and_never_what_a_link_points_to(
    tmp_path: Path, secret: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("nbgrader", reason="tools.classroom is instructor tooling: nbgrader is not in the compat venv")
    from tools.classroom.collect import collect

    folder, course = _class(tmp_path, secret), tmp_path / "course"
    assert collect(course, folder) == 1
    submitted = sorted(p.relative_to(course).as_posix() for p in course.rglob("*.ipynb"))
    assert submitted == [f"submitted/honest/ex01/{NOTEBOOK}"]
    err = capsys.readouterr().err
    for student in ("linker", "dangler", "folderer", "piper"):
        assert f"{student}/{NOTEBOOK}: {NOTEBOOK} is " in err
    assert "linked-student: a student folder that is a symbolic link; skipped" in err


@pytest.mark.skipif(sys.platform != "linux", reason="/dev/zero")
def test_a_link_to_an_endless_file_is_never_read(tmp_path: Path) -> None:
    """A link to ``/dev/zero`` grew the reading process until memory ran out."""
    student = tmp_path / "class" / "zero"
    student.mkdir(parents=True)
    (student / NOTEBOOK).symlink_to("/dev/zero")
    (job,), _ = batch.discover(tmp_path / "class", tmp_path / "out")
    assert "symbolic link" in job.unreadable


def test_names_a_download_gave_are_skipped_with_the_rename_that_fixes_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A learning platform's download renames files (``smithj_48213_01_...``) and may put them all in one folder:
    both are skipped, and the warning says what to rename and where to put it. Of two copies, the newer is taken."""
    pytest.importorskip("nbgrader", reason="tools.classroom is instructor tooling: nbgrader is not in the compat venv")
    from tools.classroom.collect import collect

    folder, course = tmp_path / "class", tmp_path / "course"
    renamed = folder / "smithj" / f"smithj_48213_{NOTEBOOK}"
    renamed.parent.mkdir(parents=True)
    renamed.write_text(json.dumps(nbformat.v4.new_notebook()))
    loose = folder / f"jonesa_48214_{NOTEBOOK}"
    loose.write_text(json.dumps(nbformat.v4.new_notebook()))
    older, newer = folder / "twice" / "old" / NOTEBOOK, folder / "twice" / NOTEBOOK
    older.parent.mkdir(parents=True)
    older.write_text(json.dumps(nbformat.v4.new_notebook(metadata={"copy": "older"})))
    newer.write_text(json.dumps(nbformat.v4.new_notebook(metadata={"copy": "newer"})))
    os.utime(older, (1_000_000, 1_000_000))
    assert collect(course, folder) == 1
    taken = json.loads((course / "submitted" / "twice" / "ex01" / NOTEBOOK).read_text())
    assert taken["metadata"]["copy"] == "newer"
    err = capsys.readouterr().err
    assert f"{renamed}: not an exercise notebook" in err and f"rename it to {NOTEBOOK}" in err, err
    assert f"{loose}: a notebook goes in a folder per student, {folder}/<student>/{NOTEBOOK}; skipped" in err, err
    assert "1 notebook(s) lie directly in" in err and "twice has a newer ex01 notebook; skipped" in err, err
    _, warnings = batch.discover(folder, tmp_path / "out")
    assert any(f"rename it to {NOTEBOOK}" in w for w in warnings), warnings
    assert any(f"{folder}/<student>/{NOTEBOOK}; skipped" in w for w in warnings), warnings
