"""``coursekit.rehearse``: a cold-start speed check rehearsed in a learner's kernel, both sides in turns."""

from __future__ import annotations

import time

import pytest
import torch

from coursekit.rehearse import cold_ratio


def test_cold_ratio_alternates_the_sides_from_a_fresh_compile_state_and_reports_the_median(
    monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    order: list[str] = []
    resets: list[int] = []
    monkeypatch.setattr(torch.compiler, "reset", lambda: resets.append(len(order)))
    threads = torch.get_num_threads()

    def side(name: str, seconds: float):
        def run() -> None:
            assert resets and resets[-1] == len(order), "every call starts from torch.compiler.reset()"
            order.append(name)
            time.sleep(seconds)

        return run

    report = cold_ratio(side("b", 0.04), side("y", 0.01), what="a test", baseline_name="base", trials=3, threads=1)
    assert order == ["b", "y", "b", "y", "y", "b", "b", "y"], "one untimed call each, then turns"
    assert len(report.ratios) == 3 and 2.0 < report.speedup < 6.0, report
    assert torch.get_num_threads() == threads, "the kernel's threads come back"
    printed = capsys.readouterr().out
    assert printed.count("trial ") == 3 and "median" in printed and "not the grader's measurement" in printed
    report._ipython_display_()  # a notebook cell that ends with the call: the summary is not shown twice
    assert capsys.readouterr().out == ""
    assert repr(report).startswith("Rehearsal(") and "x over 3 trial(s): a test" in repr(report)
    quiet = cold_ratio(side("b", 0.0), side("y", 0.0), what="q", baseline_name="base", trials=1, show=False)
    quiet._ipython_display_()
    assert "q: median" in capsys.readouterr().out, "printed nothing: a cell that ends with it shows the summary"


def test_cold_ratio_needs_a_trial() -> None:
    with pytest.raises(ValueError, match="at least one trial"):
        cold_ratio(lambda: None, lambda: None, what="x", baseline_name="y", trials=0)


def test_cold_ratio_times_on_the_profiles_threads_unless_told_otherwise() -> None:
    from coursekit.profile import get_profile

    seen: list[int] = []
    cold_ratio(lambda: seen.append(torch.get_num_threads()), lambda: None, what="x", baseline_name="y", trials=1,
               show=False)  # fmt: skip
    assert set(seen) == {get_profile().threads}


def test_the_graders_baseline_runs_without_dynamos_warnings_and_yours_with_them(monkeypatch) -> None:
    """Exercise 4's static baseline hits the recompile limit every trial; its warnings are the grader's, not the
    learner's (a blind attendee, session 45), so only the baseline's side is quiet, and ``TORCH_LOGS`` wins."""
    import logging

    monkeypatch.delenv("TORCH_LOGS", raising=False)
    frame = logging.getLogger("torch._dynamo.convert_frame")
    seen: dict[str, list[bool]] = {"base": [], "yours": []}

    def side(name: str):
        return lambda: seen[name].append(frame.isEnabledFor(logging.WARNING))

    cold_ratio(side("base"), side("yours"), what="x", baseline_name="y", trials=2, show=False)
    assert seen == {"base": [False] * 3, "yours": [True] * 3}, seen
    assert frame.isEnabledFor(logging.WARNING), "the levels come back"
    monkeypatch.setenv("TORCH_LOGS", "recompiles")
    seen = {"base": [], "yours": []}
    cold_ratio(side("base"), side("yours"), what="x", baseline_name="y", trials=1, show=False)
    assert seen["base"] == [True, True], "with TORCH_LOGS set, nothing is silenced"
