"""The notebook loader runs definitions only, and reports broken cells instead of crashing."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import nbformat
import pytest
from IPython.core import inputtransformer2

from grader import loader
from grader.interface import contract
from grader.learner_failures import explain
from grader.loader import MAX_JSON_VALUES, NotebookError, load_cells, load_notebook, read_cells, submission_bytes
from grader.scan import scan_cells


def test_runs_definitions_and_skips_demo_cells() -> None:
    loaded = load_cells(
        [
            "import math\nLIMIT = 3\ncounter = 0\ndef f():\n    return LIMIT\nprint('demo')\nraise SystemExit(1)",
            "%time x = 1\nclass A:\n    pass\nfor i in range(10**12):\n    pass",
        ]
    )
    names = {k for k in loaded.namespace if not k.startswith("__")}
    assert names == {"math", "LIMIT", "f", "A"}
    assert loaded.problems == []


def test_upper_case_constants_unpacked_from_a_tuple_are_loaded_and_mixed_case_ones_are_not() -> None:
    """A blind learner, session 36: ``RTOL, ATOL = 1e-3, 1e-4`` was skipped, so their function's NameError (which
    the hint said to fix by naming constants in UPPER_CASE) failed two checks."""
    loaded = load_cells(["RTOL, ATOL = 1e-3, 1e-4\n[LO, *REST] = range(3)\nA = B = 2\nTOP, low = 1, 2\nC = d = 3"])
    names = {k for k in loaded.namespace if not k.startswith("__")}
    assert names == {"RTOL", "ATOL", "LO", "REST", "A", "B"}
    assert loaded.namespace["REST"] == [1, 2]


def test_one_broken_cell_costs_only_its_names() -> None:
    loaded = load_cells(["def ok():\n    return 1", "def broken(:\n    pass", "X = undefined_name\ndef later(): pass"])
    assert "ok" in loaded.namespace and "later" in loaded.namespace
    assert "broken" not in loaded.namespace
    assert any("code cell 2 has a syntax error" in p for p in loaded.problems)
    assert any("code cell 3" in p and "NameError" in p for p in loaded.problems)


def test_missing_name_message_names_the_contract_and_the_load_problems() -> None:
    failure = explain(
        {"kind": "missing", "name": "SmoothedCE"},
        contract("ex01", "SmoothedCE"),
        ["code cell 4 has a syntax error on line 2: invalid syntax"],
        "ex01.loss",
    )
    with pytest.raises(AssertionError, match=r"(?s)`SmoothedCE` is not defined.*class SmoothedCE.*code cell 4"):
        raise failure


@pytest.mark.parametrize(
    "content, reason",
    [
        (None, "notebook not found"),
        (b'{"cells": [', "not valid notebook JSON"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        (b"[1, 2, 3]", "not a Jupyter notebook"),
        (b'{"cells": [], "x": ' + b"[" * 200_000 + b"]" * 200_000 + b"}", "nests its JSON deeper"),  # red team 29
        (b'{"nbformat": 3, "worksheets": [{"cells": []}], "cells": []}', "format 3's 'worksheets'.*save it"),
        (b'{"cells": []}', "not in notebook format 4"),
    ],
)
def test_unreadable_notebooks_raise_a_clear_error(tmp_path: Path, content: bytes | None, reason: str) -> None:
    path = tmp_path / "01_bad.ipynb"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(NotebookError, match=reason):
        load_notebook(path)


def test_loads_a_real_notebook_file(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("def f():\n    return 41 + 1\nf()")])
    path = tmp_path / "01_x.ipynb"
    path.write_text(json.dumps(nb))
    assert load_notebook(path).namespace["f"]() == 42


def test_a_name_error_says_what_the_grader_runs() -> None:
    """It worked in the notebook: a lower-case constant the loader does not run. The message says why."""
    failure = explain(
        {"kind": "exception", "type": "NameError", "message": "name 'buckets' is not defined"},
        contract("ex04", "collate"),
        [],
        "ex04.collate",
    )
    assert "name 'buckets' is not defined" in str(failure) and "UPPER_CASE" in str(failure)


def test_an_error_dynamo_raised_gets_the_advice_for_its_type() -> None:
    """Not every error from torch._dynamo is a graph break: a shape bug found while tracing, a backend that failed
    and the recompile limit each say what to do about them."""

    def said(etype: str) -> str:
        error = {"kind": "exception", "type": etype, "message": "m", "where": "", "dynamo": True, "torch": True}
        return str(explain(error, contract("ex04", "collate"), [], "ex04.collate"))

    assert "Run it without torch.compile" in said("TorchRuntimeError")
    assert "backend='eager'" in said("BackendCompilerFailed")
    assert "TORCH_LOGS=recompiles" in said("FailOnRecompileLimitHit")
    assert "TORCH_LOGS=graph_breaks" in said("Unsupported") and "one graph" in said("Unsupported")


def test_an_error_names_the_code_cell_and_line_a_learner_can_find() -> None:
    from grader.probing import ordinal, where_in_notebook

    loaded = load_cells(["import math", "def f(x):\n    y = x + 1\n    return y / 0"])
    with pytest.raises(ZeroDivisionError) as info:
        loaded.namespace["f"](1)
    assert where_in_notebook(info.value) == " (in `f`, the 2nd code cell, line 3: `return y / 0`)"
    loaded = load_cells(["class Net:\n    def __init__(self):\n        raise NotImplementedError()"])
    with pytest.raises(NotImplementedError) as info:
        loaded.namespace["Net"]()
    assert where_in_notebook(info.value) == (
        " (in `Net.__init__`, the 1st code cell, line 3: `raise NotImplementedError()`)"
    ), "a method is named with its class"
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th"
    ]  # fmt: skip


def test_a_graph_break_reason_comes_with_its_line_and_plain_words() -> None:
    """What ex01's and ex02's structure checks show: Dynamo's reason, the learner's line, and what it means."""
    import torch

    from coursekit.explain import short_reason

    loaded = load_cells(["import torch", "def f(x):\n    if x.sum() > 0:\n        x = x + 1\n    return x * 2"])
    torch.compiler.reset()
    reasons = [short_reason(r) for r in torch._dynamo.explain(loaded.namespace["f"])(torch.ones(3)).break_reasons]
    torch.compiler.reset()
    assert reasons and "<code cell 2>:2: if x.sum() > 0:" in reasons[0], reasons
    assert "torch.where" in reasons[0], f"no plain-words gloss: {reasons[0]}"


def test_a_break_inside_a_library_call_is_named_at_the_learners_line() -> None:
    """A break Dynamo hits inside ``logging`` was named at ``logging/__init__.py:2087`` (a blind attendee, session
    45): the reason names the learner's own line that called it."""
    import torch

    from coursekit.explain import short_reason

    cell = "def f(x):\n    y = x + 1\n    logging.getLogger('kit-test').info('x')\n    return y * 2"
    loaded = load_cells(["import logging\nimport torch", cell])
    torch.compiler.reset()
    reasons = torch._dynamo.explain(loaded.namespace["f"])(torch.ones(3)).break_reasons
    torch.compiler.reset()
    assert reasons and len(reasons[0].user_stack) > 1, "the break is inside logging, below the learner's line"
    said = short_reason(reasons[0])
    assert "<code cell 2>:3: logging.getLogger('kit-test').info('x')" in said and "__init__.py" not in said, said


def _special(kind: str, path: Path, tmp_path: Path) -> None:
    """Make ``path`` a file of ``kind`` that is not a notebook (what the red team of session 30 submitted)."""
    real = tmp_path / "elsewhere.ipynb"
    real.write_text(json.dumps(nbformat.v4.new_notebook()))
    if kind == "link":  # to a solution, a classmate's notebook, /dev/zero: never followed
        path.symlink_to(real)
    elif kind == "dangling link":
        path.symlink_to(tmp_path / "nothing-here")
    elif kind == "folder":
        path.mkdir()
    elif kind == "pipe":  # reading one would wait for a writer forever
        os.mkfifo(path)


@pytest.mark.parametrize(
    "kind, reason",
    [
        ("link", "is a symbolic link, not a notebook"),
        ("dangling link", "is a symbolic link, not a notebook"),
        ("folder", "is a folder, not a notebook"),
        ("pipe", "not a regular file"),
    ],
)
def test_only_a_regular_file_is_read_as_a_notebook(tmp_path: Path, kind: str, reason: str) -> None:
    path = tmp_path / "01_cross_entropy_ladder.ipynb"
    _special(kind, path, tmp_path)
    with pytest.raises(NotebookError, match=reason):
        submission_bytes(path)
    with pytest.raises(NotebookError, match=reason):
        load_notebook(path)


def test_a_notebook_that_would_take_gigabytes_to_parse_is_refused_before_parsing(tmp_path: Path) -> None:
    """94 MiB of ``[],`` took a batch process to 5.6 GB (red team, session 30): values are counted before parsing."""

    def lists(n: int) -> bytes:
        return b'{"nbformat": 4, "cells": [], "metadata": {"x": [' + b"[]," * n + b"[]]}}"

    path = tmp_path / "01_x.ipynb"
    path.write_bytes(lists(MAX_JSON_VALUES // 2))
    with pytest.raises(NotebookError, match="JSON values"):
        load_notebook(path)
    path.write_bytes(lists(MAX_JSON_VALUES // 2 - 10))
    assert read_cells(path) == [], "a notebook under the limit is read"


def test_a_cell_ipython_cannot_rewrite_costs_only_its_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """501 shell lines in one cell: IPython gives up after 500 rewrites and raises (red team, session 30, in which it
    ended the grading of a whole class). Here its limit is 5, and the cell has 6. The cell is not loaded, the others
    are, and the scan passes it over."""
    monkeypatch.setattr(inputtransformer2, "TRANSFORM_LOOP_LIMIT", 5)
    cells = ["!true\n" * 6 + "def lost():\n    return 0\n", "def kept():\n    return 1\n"]
    loaded = load_cells(cells)
    assert "lost" not in loaded.namespace and loaded.namespace["kept"]() == 1
    assert loaded.problems == [
        "code cell 1: IPython could not rewrite its %magic and !shell lines (Input transformation still changing "
        "after 5 iterations. Aborting.); nothing in that cell was loaded"
    ]
    assert scan_cells(cells) == []


def test_rewriting_magics_stops_at_the_notebooks_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each %magic or !shell line costs IPython a pass over the whole cell: 78 KB of them kept the judge busy for
    minutes. Past the notebook's budget, a cell is refused at once; a lesson notebook costs about 20,000."""
    monkeypatch.setattr(loader, "MAX_REWRITE_WORK", 50_000)
    heavy = "!true\n" * 200 + "x = 1\n" * 500
    started = time.perf_counter()
    loaded = load_cells([heavy, heavy, "%time y = 2\nZ = 3\n"])
    scan_cells([heavy, heavy])
    assert time.perf_counter() - started < 2.0
    assert len(loaded.problems) == 3 and all("would take IPython too long" in p for p in loaded.problems)
    assert "Z" not in loaded.namespace, "a budget spent is spent for the rest of the notebook"
    assert load_cells(["%time y = 2\nZ = 3\n"]).namespace["Z"] == 3, "a notebook's own budget starts full"


def test_a_cell_nested_too_deep_to_parse_costs_only_its_names_and_the_scan_reads_the_rest() -> None:
    """Red team, session 30: such a cell ended the worker's load (every check failed) and made the judge's scan drop
    every other cell's flags."""
    cells = ["X = a" + ".b" * 120_000 + "\n", "def kept():\n    return 1\n", "import grader.exercises.ex01.reference\n"]
    loaded = load_cells(cells)
    assert loaded.namespace["kept"]() == 1
    assert loaded.problems[0].startswith("code cell 1 could not be parsed (RecursionError")
    flags = [str(f) for f in scan_cells(cells)]
    assert flags[0] == "code cell 1, line 0: this cell is too deeply nested or too large to scan"
    assert any(f.startswith("code cell 3, line 1: imports the grader's internals") for f in flags), flags


def test_a_format_3_notebook_cannot_show_jupyter_one_set_of_cells_and_the_grader_another(tmp_path: Path) -> None:
    """Red team, session 32: nbformat (Jupyter, nbgrader, the batch's repair) reads a format-3 file's ``worksheets``,
    the grader read its top-level ``cells``. A file with the released cells in one and a solution in the other
    scored full marks in ``grader batch`` with code no reviewer could see. The grader now reads format 4 only."""
    visible = {"cell_type": "code", "input": "raise NotImplementedError()", "outputs": [], "metadata": {}}  # v3
    hidden = {"cell_type": "code", "source": "def f():\n    return 42\n", "outputs": [], "metadata": {}}
    nb = {"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [{"cells": [visible]}], "cells": [hidden]}
    path = tmp_path / "00_x.ipynb"
    path.write_text(json.dumps(nb))
    assert [c.source for c in nbformat.read(path, as_version=4).cells] == ["raise NotImplementedError()"]
    with pytest.raises(NotebookError, match="not in notebook format 4"):
        load_notebook(path)


def test_a_graph_break_fullgraph_refused_names_the_learners_line_and_dynamos_explanation() -> None:
    """Dynamo raises from its own frames: the learner's line is found in its message, and the gist carries its
    explanation, not only its title."""
    import torch

    from grader.probing import describe_error

    loaded = load_cells(["def loss(x):\n    y = x.sin()\n    for part in 'ab':\n        print(part)\n    return y"])
    torch.compiler.reset()
    with pytest.raises(Exception) as info:
        torch.compile(loaded.namespace["loss"], backend="eager", fullgraph=True)(torch.ones(3))
    error = describe_error(info.value)
    assert error["dynamo"] and error["where"] == " (in `loss`, the 1st code cell, line 4: `print(part)`)", error
    assert "print" in error["gist"] and ": " in error["gist"], error["gist"]


def test_a_custom_op_error_is_said_without_the_grading_machines_paths() -> None:
    from grader.probing import describe_error

    exc = RuntimeError("calibrate (with implementation in <module 'torch._library.custom_ops' from '/srv/x.py'>): bad")
    assert describe_error(exc)["message"] == "calibrate: bad"
