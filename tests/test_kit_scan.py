"""The learner kit's release scan, without running nbgrader: nothing that ships defines a name learners must write.

``make release`` runs the same scan on the staged kit (the workflow test, in ``make test``'s timing pass); this
test runs it in ``make test-fast``, so a grader helper named like an interface name is caught in seconds.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("nbgrader", reason="tools.classroom is instructor tooling: nbgrader is not in the compat venv")

from tools.classroom.kit_contents import kit_files  # noqa: E402
from tools.classroom.kit_scan import _closed_imports, forbidden_definitions  # noqa: E402


def test_no_shipped_module_defines_an_interface_name_or_a_reference_function(tmp_path: Path) -> None:
    files, _ = kit_files()
    for rel, src in files.items():
        if rel.endswith(".py") or rel.startswith("notebooks/"):
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, tmp_path / rel)
    assert any(rel.startswith("grader/exercises/") for rel in files), "the kit ships the public checks"
    problems, _ = forbidden_definitions(tmp_path)
    assert problems == [], problems
    assert _closed_imports(tmp_path) == [], "a shipped module imports one that does not ship: the kit would break"


def test_the_scan_refuses_a_shipped_module_that_defines_an_interface_name(tmp_path: Path) -> None:
    (tmp_path / "grader").mkdir()
    (tmp_path / "grader" / "helper.py").write_text("def op_counts(fn, args):\n    return {}\n")
    problems, _ = forbidden_definitions(tmp_path)
    assert problems and "op_counts" in problems[0], problems


def test_the_kit_readme_promises_timed_checks_only_where_the_kit_holds_some(monkeypatch) -> None:
    from types import SimpleNamespace

    from grader import registry
    from tools.classroom.kit_templates import kit_timing_line

    assert "untimed" in kit_timing_line() and "FULL=1" not in kit_timing_line()  # no public check is timed today
    timed = SimpleNamespace(id="ex09.fast", kind="speed", public=True)
    monkeypatch.setattr(registry, "load_all", lambda: {"ex09.fast": timed})
    assert "FULL=1" in kit_timing_line() and "ex09.fast" in kit_timing_line()


def test_the_scan_lets_an_instructor_module_be_imported_only_inside_a_function(tmp_path: Path) -> None:
    """A shipped module may import grader.speed where only the instructor's path runs it (inside a function);
    imported at module level, the kit would fail at its first import, and the scan stops the release."""
    (tmp_path / "grader").mkdir()
    (tmp_path / "grader" / "report.py").write_text("def late():\n    from grader.speed import compare\n")
    assert _closed_imports(tmp_path) == []
    (tmp_path / "grader" / "report.py").write_text("from grader.speed import distinct\n")
    assert _closed_imports(tmp_path) == ["grader/report.py imports grader.speed, which does not ship"]
    (tmp_path / "grader" / "report.py").write_text("def f():\n    from grader.nowhere import x\n")
    assert _closed_imports(tmp_path) == ["grader/report.py imports grader.nowhere, which does not ship"]


def test_the_kit_setup_checks_the_disk_first_with_the_file_it_ships(tmp_path: Path) -> None:
    """The kit's ``make setup`` runs ``tools/disk_room.py`` before it makes the venv: the file ships, runs from the
    kit's root without a ``tools/__init__.py`` (with the system's ``python3``, as the kit's Makefile does), and
    refuses a disk too small, naming the CPU-only way out."""
    import subprocess

    from tools.classroom.kit_contents import KIT_DISK_CHECK
    from tools.classroom.kit_templates import KIT_MAKEFILE

    files, _ = kit_files()
    assert KIT_DISK_CHECK in files and not any(rel == "tools/__init__.py" for rel in files)
    (tmp_path / "tools").mkdir()
    shutil.copy2(files[KIT_DISK_CHECK], tmp_path / KIT_DISK_CHECK)
    (tmp_path / "Makefile").write_text(KIT_MAKEFILE)
    (tmp_path / "requirements.txt").write_text("torch==2.14.1\n")
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "TORCH_INDEX", "VENV")}
    dry_run = ["make", "--no-print-directory", "-n", "setup"]  # as a learner types it, not inside `make test`
    planned = subprocess.run(dry_run, cwd=tmp_path, env=env, capture_output=True, text=True, check=True).stdout
    first = planned.splitlines()[0]
    assert "-m tools.disk_room" in first and "TORCH_INDEX=" in first, planned
    cpu = subprocess.run([*dry_run, "TORCH_INDEX=x"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert "tools.disk_room" not in cpu.stdout, "a CPU-only torch is smaller (not measured): no 7 GiB floor"
    refused = subprocess.run(
        ["python3", "-s", "-m", "tools.disk_room", ".venv", "1e9", "make setup", "or a CPU-only torch"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 1 and "needs about 1e+09 GiB" in refused.stderr, refused.stderr
    assert refused.stderr.rstrip().endswith("; or a CPU-only torch"), refused.stderr
