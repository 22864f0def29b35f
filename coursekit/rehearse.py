"""Rehearse a cold-start speed check in your own kernel: the grader's baseline and your code, in turns.

Some speed checks time compiling itself (a stream of new shapes, the first training step of a model), and only
your instructor's grading runs them. ``cold_ratio`` runs the same two sides here, each from a fresh compile state
in memory (``torch.compiler.reset()``, which leaves the on-disk caches alone: cold only for backends that keep
none, such as the ``aot_eager`` the lessons' checks time), alternating which goes first, and prints each trial's
times and ratio as it ends, then their median. A guide, not a grade: the grader times both sides on the same
pinned cores with everything else stopped, and your machine's load moves what you see here (run it twice when it
lands near the threshold).
Each lesson whose exercise has such a check wraps this with its own two sides, in its ``rehearse.py``.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from coursekit.profile import get_profile
from coursekit.quiet import compile_warnings_off
from coursekit.timing import synchronize


@dataclass(repr=False)
class Rehearsal:
    """Seconds each side took in each trial; ``speedup`` is the median of the trials' ratios, as the grader's.
    Shown once: a notebook cell that ends with the call displays nothing more when ``cold_ratio`` has printed it
    already (``shown``), where the dataclass's own repr printed every field again (a blind attendee, session 45)."""

    what: str
    baseline: str
    baseline_s: list[float]
    yours_s: list[float]
    shown: bool = False

    def __repr__(self) -> str:
        return f"Rehearsal({self.speedup:.2f}x over {len(self.ratios)} trial(s): {self.what})"

    def _ipython_display_(self) -> None:
        """What Jupyter shows for a cell that ends with this object: the summary, unless it was printed already."""
        if not self.shown:
            print(self)

    @property
    def ratios(self) -> list[float]:
        return [b / y for b, y in zip(self.baseline_s, self.yours_s)]

    @property
    def speedup(self) -> float:
        return statistics.median(self.ratios)

    def __str__(self) -> str:
        return (
            f"{self.what}: median {self.speedup:.2f}x over {len(self.ratios)} trial(s) against {self.baseline} "
            f"(medians {statistics.median(self.baseline_s):.2f} s vs {statistics.median(self.yours_s):.2f} s). "
            "Compare it with the gain the check requires (`make check`'s table), and leave a margin: this is your "
            "machine, under its load, not the grader's measurement"
        )


def _run_side(fn: Callable[[], Any], baseline: bool) -> Any:
    with compile_warnings_off() if baseline else contextlib.nullcontext():
        return fn()


def cold_ratio(
    baseline: Callable[[], Any],
    yours: Callable[[], Any],
    *,
    what: str,
    baseline_name: str,
    trials: int = 3,
    device: str | torch.device | None = None,
    threads: int | None = None,
    show: bool = True,
) -> Rehearsal:
    """Time ``baseline()`` and ``yours()`` ``trials`` times each, in turns, each from ``torch.compiler.reset()``,
    after one untimed call of each (imports and first-use costs, which the grader pays before it times), with
    torch on ``threads`` threads meanwhile. ``device`` (synchronised around each call) and ``threads`` default to
    the profile's, as the grader times."""
    if trials < 1:
        raise ValueError("cold_ratio needs at least one trial")
    profile = get_profile()
    device = profile.device if device is None else device
    before = torch.get_num_threads()
    torch.set_num_threads(threads or profile.threads)
    times: tuple[list[float], list[float]] = ([], [])
    try:
        for side, fn in enumerate((baseline, yours)):
            torch.compiler.reset()
            _run_side(fn, baseline=side == 0)
        for trial in range(trials):
            for side in (0, 1) if trial % 2 == 0 else (1, 0):
                torch.compiler.reset()
                synchronize(device)
                start = time.perf_counter()
                _run_side((baseline, yours)[side], baseline=side == 0)
                synchronize(device)
                times[side].append(time.perf_counter() - start)
            if show:
                b, y = times[0][-1], times[1][-1]
                line = f"trial {trial + 1}/{trials}: {baseline_name} {b:.2f} s, yours {y:.2f} s: {b / y:.2f}x"
                print(line, flush=True)
    finally:
        torch.compiler.reset()
        torch.set_num_threads(before)
    report = Rehearsal(what, baseline_name, *times, shown=show)
    if show:
        print(report)
    return report
