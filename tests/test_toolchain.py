"""The C++ compiler check that ``make setup`` and lesson 0 run first."""

from __future__ import annotations

import pytest

from coursekit import toolchain


def test_a_missing_compiler_is_named_with_how_to_install_one(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("CXX", "no-such-compiler-g++")
    monkeypatch.setattr(toolchain.sys, "platform", "linux")
    problem = toolchain.compiler_problem()
    assert problem and "'no-such-compiler-g++' is not on PATH" in problem and "apt-get install g++" in problem
    assert toolchain.main() == 1 and capsys.readouterr().out.startswith("WARNING: no C++ compiler")


def test_a_compiler_that_does_not_run_is_a_problem_too(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    broken = tmp_path / "g++"
    broken.write_text("#!/bin/sh\nexit 3\n")
    broken.chmod(0o755)
    monkeypatch.setenv("CXX", str(broken))
    assert "does not run (CalledProcessError)" in (toolchain.compiler_problem() or "")


def test_this_machines_compiler_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CXX", raising=False)
    assert toolchain.compiler_problem() is None, "the kit's own tests compile with Inductor: they need g++"
    assert toolchain.compiler_line().startswith("C++ compiler for Inductor: g++")


def test_on_a_gpu_machine_a_missing_c_compiler_for_triton_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton builds its launcher with $CC, gcc or clang, not $CXX: a GPU machine with g++ alone still fails."""
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setenv("CC", "no-such-compiler-gcc")
    monkeypatch.setattr(toolchain.sys, "platform", "linux")
    problem = toolchain.compiler_problem(gpu=True)
    assert problem and problem.startswith("no C compiler: 'no-such-compiler-gcc'") and "apt-get install gcc" in problem
    assert toolchain.compiler_problem(gpu=False) is None  # a CPU machine needs only the C++ compiler
