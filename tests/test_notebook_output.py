"""What a learner's code prints during a check cell: shown after a failure, held back (with a line) after a pass
(blind attendees, session 45: exercise 5's passing check showed 80 lines of the bisector's log before its verdict,
and a failing ladder's printed exception was the one thing that would have explained it)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from grader import notebook
from grader.quiet import PrintedTail


def builtin(chatty: int, right: bool):
    def builtin_smoothed_ce(class_weights, smoothing: float = 0.1, ignore_index: int = -100) -> nn.Module:
        for i in range(chatty):
            print(f"debug line {i}")
        weight = torch.tensor(class_weights, dtype=torch.float32)
        return nn.CrossEntropyLoss(weight=weight, ignore_index=ignore_index, label_smoothing=smoothing if right else 0)

    return builtin_smoothed_ce


def test_a_passing_check_holds_back_what_the_code_printed(capsys: pytest.CaptureFixture) -> None:
    notebook.run_check("ex01.builtin.values", {"builtin_smoothed_ce": builtin(3, right=True)})
    out = capsys.readouterr().out
    assert "debug line" not in out and "held back because it passed" in out, out
    assert "show_output=True" in out
    notebook.run_check("ex01.builtin.values", {"builtin_smoothed_ce": builtin(3, right=True)}, show_output=True)
    out = capsys.readouterr().out
    assert "debug line 2" in out and "held back" not in out, out


def test_a_failing_check_shows_the_last_lines_the_code_printed(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(AssertionError):
        notebook.run_check("ex01.builtin.values", {"builtin_smoothed_ce": builtin(100, right=False)})
    out = capsys.readouterr().out
    assert f"its last {notebook.SHOWN_LINES} lines" in out and "debug line 99" in out, out
    assert "debug line 59" not in out, "only the last lines"


def test_the_held_output_is_bounded() -> None:
    held = PrintedTail(limit=100)
    for i in range(10_000):
        held.write(f"line {i}\n")
    assert held.lines == 10_000 and len(held.tail) == 100 and held.last_lines(1) == "line 9999"
