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


def test_the_kits_load_cache_says_what_it_unpacked_and_fails_without_a_cache(tmp_path: Path) -> None:
    """A host helper (session 45): ``make load-cache`` printed only its commands and hid every failure."""
    import os
    import subprocess
    import sys
    import tarfile

    from tools.classroom.kit_templates import KIT_MAKEFILE

    if shutil.which("make") is None:
        pytest.skip("no make on this machine")
    (tmp_path / "Makefile").write_text(KIT_MAKEFILE)
    venv = Path(sys.executable).parent.parent

    env = {k: v for k, v in os.environ.items() if k != "TORCHINDUCTOR_CACHE_DIR"}  # the kit's own folder, not ours

    def load() -> subprocess.CompletedProcess:
        command = ["make", "-s", "load-cache", f"VENV={venv}"]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)

    empty = load()
    assert empty.returncode != 0 and "no cache/*.tar.gz or cache/*.bin here" in empty.stdout, empty
    (tmp_path / "kernel.py").write_text("# a cached kernel\n")
    (tmp_path / "cache").mkdir()
    with tarfile.open(tmp_path / "cache" / "inductor-cpu-test.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "kernel.py", arcname="kernel.py")
    loaded = load()
    assert loaded.returncode == 0, loaded
    assert "unpacked cache/inductor-cpu-test.tar.gz: 1 entries into .cache/inductor" in loaded.stdout, loaded.stdout
    assert (tmp_path / ".cache" / "inductor" / "kernel.py").is_file()
