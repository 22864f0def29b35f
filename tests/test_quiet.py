"""Warnings during an in-notebook check reach stdout, never stderr (which nbgrader would score as a failure)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest


def test_every_kind_of_stderr_write_is_rerouted_to_stdout() -> None:
    script = textwrap.dedent("""
        import logging, os, sys, warnings
        logging.basicConfig()  # a root handler bound to sys.stderr, as libraries set up
        from grader.quiet import stderr_to_stdout
        with stderr_to_stdout():
            warnings.warn("from-warnings")
            logging.getLogger("lib").warning("from-logging")
            sys.stderr.write("from-sys-stderr\\n")
            os.write(2, b"from-fd-2\\n")
        sys.stderr.write("after-the-block\\n")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for marker in ("from-warnings", "from-logging", "from-sys-stderr", "from-fd-2"):
        assert marker in proc.stdout and marker not in proc.stderr, (marker, proc.stdout, proc.stderr)
    assert proc.stderr.strip() == "after-the-block"


def test_the_judges_own_compiles_log_only_errors_while_a_check_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph break in the grader's own baseline (exercise 2's given model) logged a warning beside the learner's
    name in autograde's log (instructor walkthrough, session 31); with TORCH_LOGS set, the judge logs as asked."""
    import logging

    import torch  # noqa: F401 - torch's logging set-up, as in the judge

    from grader.quiet import judge_compiles_quiet

    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    child = logging.getLogger("torch._dynamo.variables.tensor")  # level unset: it follows torch._dynamo's
    child.addHandler(handler)
    monkeypatch.delenv("TORCH_LOGS", raising=False)
    try:
        before = logging.getLogger("torch._dynamo").level
        with judge_compiles_quiet():
            child.warning("Graph break from `Tensor.item()`")
            child.error("a real failure")
        assert logging.getLogger("torch._dynamo").level == before, "the level is put back after the check"
        child.warning("after the check")
        monkeypatch.setenv("TORCH_LOGS", "graph_breaks")
        with judge_compiles_quiet():
            child.warning("asked for")
    finally:
        child.removeHandler(handler)
    assert said == ["a real failure", "after the check", "asked for"], said
