"""``grader calibrate``'s file agrees with itself: its figures come from the runs it records."""

from __future__ import annotations

import tomllib

import pytest

from grader.calibrate import render


def test_the_spread_is_max_minus_min_of_the_recorded_runs() -> None:
    """1.7814 and 1.7476 round to 1.781 and 1.748 (spread 0.033), while their own spread rounds to 0.034: a file
    that takes the spread from unrounded runs contradicts its own `runs`, as CI's calibration test once found."""
    text, _ = render({"ex02.scorer.speed": [1.7814, 1.7476]}, fraction=0.25, runs=2)
    entry = tomllib.loads(text)["checks"]["ex02.scorer.speed"]
    assert entry["runs"] == [1.781, 1.748]
    assert entry["spread"] == pytest.approx(max(entry["runs"]) - min(entry["runs"]), abs=1e-9)
    assert (entry["min"], entry["max"]) == (1.748, 1.781)


def test_a_run_stopped_part_way_keeps_the_exercises_it_measured(tmp_path, monkeypatch) -> None:
    """The H200's calibrate call ran out of time in its last exercise and left no file: four exercises' runs were in
    its log only. The file is now written after every exercise."""
    from types import SimpleNamespace

    from grader import calibrate

    def grade_notebook(notebook, exercise, profile, secret, check_ids, progress):
        if exercise == "ex02":
            raise KeyboardInterrupt  # the call's time limit, during the second exercise
        return SimpleNamespace(results=[SimpleNamespace(id=cid, measured=90.0, message="") for cid in check_ids])

    monkeypatch.setattr(calibrate, "grade_notebook", grade_notebook)
    with pytest.raises(KeyboardInterrupt):
        calibrate.main(["--runs", "2", "--only", "ex02.scorer.speed,ex01.compiled.speed", "--out", str(tmp_path)])
    (written,) = tmp_path.glob("*.toml")
    assert set(tomllib.loads(written.read_text())["checks"]) == {"ex01.compiled.speed"}
