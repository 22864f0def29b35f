"""tools.test_times reads make test's own passes, not the compat pass that runs the same tests again."""

from __future__ import annotations

from pathlib import Path

from tools import test_times


def _junit(path: Path, cases: dict[str, float]) -> None:
    rows = "".join(f'<testcase classname="tests.test_notebooks" name="{n}" time="{t}"/>' for n, t in cases.items())
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{rows}</testsuite></testsuites>')


def test_make_tests_passes_only_unless_asked(tmp_path: Path, capsys, monkeypatch) -> None:
    _junit(tmp_path / "tests-parallel.xml", {"lesson[notebooks/03_x.ipynb]": 100.0})
    _junit(tmp_path / "tests-timing.xml", {"speed": 20.0})
    _junit(tmp_path / "tests-compat.xml", {"lesson[notebooks/03_x.ipynb]": 90.0})
    assert test_times.durations(tmp_path) == {
        "test_notebooks::lesson[notebooks/03_x.ipynb]": 100.0,
        "test_notebooks::speed": 20.0,
    }
    assert test_times.durations(tmp_path, ("compat",)) == {"test_notebooks::lesson[notebooks/03_x.ipynb]": 90.0}
    monkeypatch.setattr(test_times, "ROOT", tmp_path)  # main() reads ROOT / "reports"
    (tmp_path / "reports").mkdir()
    (tmp_path / "tests-compat.xml").rename(tmp_path / "reports" / "tests-compat.xml")
    try:
        test_times.main(["--passes", "parallel,timing"])
    except SystemExit as exc:
        assert "reports/tests-parallel.xml" in str(exc)
    else:
        raise AssertionError("main() should say the reports are missing")
    assert test_times.main(["--passes", "compat", "--lessons"]) == 0
    out = capsys.readouterr().out
    assert "1 tests in compat, 1.5 min" in out and "| 3 | 1.5 |" in out


def test_lesson_minutes_take_the_notebooks_from_the_compat_pass(tmp_path: Path, capsys, monkeypatch) -> None:
    """The notebooks execute in `make test-compat` only: ``--lessons`` adds their runs there to the lesson's
    gradings in `make test`, and nothing else of the compat pass (its gradings repeat make test's)."""
    reports = tmp_path / "reports"
    reports.mkdir()
    _junit(reports / "tests-parallel.xml", {"grading[ex03]": 30.0})
    _junit(reports / "tests-timing.xml", {"speed[ex03]": 6.0})
    _junit(reports / "tests-compat.xml", {"executes_top_to_bottom[notebooks/03_x.ipynb]": 90.0, "grading[ex03]": 40.0})
    monkeypatch.setattr(test_times, "ROOT", tmp_path)
    assert test_times.main(["--lessons"]) == 0
    assert "| 3 | 2.1 |" in capsys.readouterr().out
