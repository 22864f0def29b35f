"""How the grader prints a check's measured and required values: in the score table, the notebook's PASS/FAIL
lines, the feedback pages and the checks' own messages."""

from __future__ import annotations

import math


def distinct(measured: float, required: float) -> tuple[str, str]:
    """``measured`` and ``required`` as ``1.25x``, with a third or fourth decimal where two would print a
    shortfall (1.2466x against 1.25x) as equal to its threshold."""
    for digits in (2, 3, 4):
        shown, needed = f"{measured:.{digits}f}x", f"{required:.{digits}f}x"
        if shown != needed or measured == required:
            break
    return shown, needed


def format_value(value: float | None, kind: str, other: float | None = None) -> str:
    """A measured or required value: a speed as ``1.25x``, with as many decimals as it takes to tell it from
    ``other`` (a shortfall never prints equal to its threshold); anything else as it is."""
    if value is None:
        return "-"
    if kind != "speed":
        return _plain(value)
    return distinct(value, other)[0] if other is not None else f"{value:.2f}x"


def _plain(value: float) -> str:
    """``value`` as ``%g`` prints it; an int too large for a float (a learner's answer of 10**400: red team, session
    33, whose report and nbgrader's graded notebook were lost to an OverflowError) by its order of magnitude."""
    try:
        return f"{value:g}"
    except OverflowError:
        exponent = math.floor(math.log10(abs(int(value))))  # log10 takes ints of any size
        return f"{'-' if value < 0 else ''}about 1e{exponent}"
