"""A check cell that runs out of time in a notebook names the line of the learner's code it was stuck at."""

from __future__ import annotations

import linecache

import pytest

from grader import notebook

CELL = "<ipython-input-7-0123abcd>"  # how IPython names a cell's code (JupyterLab: .../ipykernel_<pid>/<hash>.py)
SOURCE = """def builtin_smoothed_ce(*args, **kwargs):
    steps = 0
    while steps >= 0:  # an endless loop
        steps += 1
"""


def test_a_check_cell_that_runs_out_of_time_names_its_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(notebook.TIMEOUT_ENV, "2")
    linecache.cache[CELL] = (len(SOURCE), None, SOURCE.splitlines(True), CELL)
    namespace: dict = {}
    exec(compile(SOURCE, CELL, "exec"), namespace)
    with pytest.raises(AssertionError) as failed:
        notebook.run_check("ex01.builtin.values", namespace)
    message = str(failed.value)
    assert message.startswith("no answer from this check after 2 s"), message
    assert "It was in `builtin_smoothed_ce`, line " in message and " of its cell: `" in message, message


def test_code_outside_the_notebook_is_not_named() -> None:
    assert notebook.where_in_kernel(None) == ""
    import sys

    assert notebook.where_in_kernel(sys._getframe()) == "", "a frame of the kit's own files is not the learner's"
