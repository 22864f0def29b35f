"""nbgrader's "Attribute 'checksum' for cell ... has changed!" for every hidden check's cell in every submission is
expected (release strips the hidden checks) and looked like tampering to an instructor (walkthrough, session 40):
``make autograde`` drops exactly those, and still shows it for any other cell or attribute."""

from __future__ import annotations

import logging

import nbformat
import pytest

from grader.worker_start import ROOT

pytest.importorskip("nbgrader", reason="the nbgrader hooks are instructor tooling: nbgrader is not in the compat venv")

from grader.nbgrader_hooks import ExpectedChecksumChange  # noqa: E402


def test_only_the_hidden_checks_checksum_warnings_are_dropped(caplog: pytest.LogCaptureFixture) -> None:
    released = nbformat.read(ROOT / "exercises" / "02_graph_breaks.ipynb", as_version=4)
    log = logging.getLogger("AutogradeApp-test")
    ExpectedChecksumChange.on(log, released)
    ExpectedChecksumChange.on(log, released)  # once per notebook, one filter per logger
    assert sum(isinstance(f, ExpectedChecksumChange) for f in log.filters) == 1
    said = "Attribute '%s' for cell %s has changed! (should be: %s, got: %s)"
    with caplog.at_level(logging.WARNING, logger=log.name):
        log.warning(said, "checksum", "ex02-scorer-speed", "a", "b")  # hidden: expected, dropped
        log.warning(said, "checksum", "ex02-scorer-outputs", "a", "b")  # a public check's cell: shown
        log.warning(said, "source", "ex02-scorer-speed", "a", "b")  # another attribute: shown
        log.warning(said, "checksum", "ex02-setup", "a", "b")  # any other cell: shown
    shown = [r.getMessage() for r in caplog.records]
    assert len(shown) == 3 and not any("'checksum' for cell ex02-scorer-speed" in m for m in shown), shown
    assert any("'checksum' for cell ex02-scorer-outputs" in m for m in shown), shown
