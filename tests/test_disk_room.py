"""make setup and make test-compat stop before installing where the disk cannot hold the environment."""

from __future__ import annotations

from pathlib import Path

from tools.disk_room import existing_parent, main, problem


def test_a_disk_too_small_is_refused_with_the_numbers(tmp_path: Path, capsys) -> None:
    venv = tmp_path / "not" / "made" / "yet"
    assert existing_parent(venv) == tmp_path.resolve()
    assert problem(venv, 0.001, "make setup") is None
    why = problem(venv, 10**9, "make setup")
    assert why is not None and why.startswith("make setup needs about 1e+09 GiB free") and "VENV=" in why, why
    assert main([str(venv), "1e9", "make setup"]) == 1 and "error: make setup needs" in capsys.readouterr().err
    assert main([str(venv), "0.001", "make setup"]) == 0
